package benchload

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// NodeProcess is what a node's /v1/status says about its process.
type NodeProcess struct {
	URL        string `json:"url"`
	NodeID     string `json:"node_id"`
	RSSBytes   int64  `json:"rss_bytes"`
	Goroutines int    `json:"goroutines"`
}

// statusURL turns a MAP WebSocket URL (ws://host:port/map) into the same
// node's /v1/status URL.
func statusURL(mapURL string) (string, error) {
	u, err := url.Parse(mapURL)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", mapURL, err)
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	case "http", "https":
	default:
		return "", fmt.Errorf("url %q: want ws:// or wss://", mapURL)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/map") + "/v1/status"
	u.RawQuery = ""
	return u.String(), nil
}

// readProcess fetches the node's /v1/status (over HTTPS with tlsCfg when
// the MAP URL is wss://).
func readProcess(ctx context.Context, mapURL string, tlsCfg *tls.Config) (NodeProcess, error) {
	su, err := statusURL(mapURL)
	if err != nil {
		return NodeProcess{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, su, nil)
	if err != nil {
		return NodeProcess{}, fmt.Errorf("status request: %w", err)
	}
	client := http.DefaultClient
	if tlsCfg != nil {
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
		defer client.CloseIdleConnections()
	}
	resp, err := client.Do(req)
	if err != nil {
		return NodeProcess{}, fmt.Errorf("get %s: %w", su, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return NodeProcess{}, fmt.Errorf("get %s: HTTP %d", su, resp.StatusCode)
	}
	var st struct {
		NodeID     string `json:"nodeId"`
		RSSBytes   int64  `json:"rssBytes"`
		Goroutines int    `json:"goroutines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return NodeProcess{}, fmt.Errorf("decode %s: %w", su, err)
	}
	return NodeProcess{URL: mapURL, NodeID: st.NodeID, RSSBytes: st.RSSBytes, Goroutines: st.Goroutines}, nil
}

// readProcesses reads every distinct URL's status, in order.
func readProcesses(ctx context.Context, urls []string, tlsCfg *tls.Config) ([]NodeProcess, error) {
	var out []NodeProcess
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] {
			continue
		}
		seen[u] = true
		p, err := readProcess(ctx, u, tlsCfg)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
