package benchload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/concordmap/concord/node/rpc"
)

// Credential is what bench participants authenticate with in map/connect:
// a MAP API key or a bearer token. The zero value connects anonymously
// (auth method none), which a node outside --dev refuses unless it allows
// anonymous participants. The credential must allow the participant ids
// the bench uses ("bench-*") and types (agent for Write and Send, client
// for Sessions).
type Credential struct {
	// Method is "api-key" or "bearer"; empty picks api-key for a token
	// starting with "map_sk_" and bearer otherwise.
	Method string
	// Token is the secret; never logged.
	Token string
}

// auth returns map/connect's auth object, nil for none.
func (c Credential) auth() *connectAuth {
	if c.Token == "" {
		return nil
	}
	m := c.Method
	if m == "" {
		m = "bearer"
		if strings.HasPrefix(c.Token, "map_sk_") {
			m = "api-key"
		}
	}
	return &connectAuth{Method: m, Credential: c.Token}
}

// connectParams is map/connect's params for a bench participant.
type connectParams struct {
	ProtocolVersion int          `json:"protocolVersion"`
	ParticipantType string       `json:"participantType"`
	ParticipantID   string       `json:"participantId,omitempty"`
	Name            string       `json:"name,omitempty"`
	Auth            *connectAuth `json:"auth,omitempty"`
}

type connectAuth struct {
	Method     string `json:"method"`
	Credential string `json:"credential"`
}

// dialSession opens a WebSocket to url and runs map/connect on it with
// cred. h serves what the node sends (nil drops it). On error nothing
// stays open.
func dialSession(ctx context.Context, url string, cfg rpc.ClientConfig, cred Credential, h rpc.Handler, participantType, participantID string) (*rpc.Conn, error) {
	conn, err := rpc.Dial(ctx, url, cfg, h)
	if err != nil {
		return nil, err
	}
	p := connectParams{ProtocolVersion: 1, ParticipantType: participantType, ParticipantID: participantID, Name: "concord-bench", Auth: cred.auth()}
	if _, err := conn.Call(ctx, "map/connect", p); err != nil {
		closeConns([]*rpc.Conn{conn})
		return nil, fmt.Errorf("map/connect to %s: %w", url, err)
	}
	return conn, nil
}

// dialAgent connects as an agent and registers agentID.
func dialAgent(ctx context.Context, url string, cfg rpc.ClientConfig, cred Credential, h rpc.Handler, agentID string) (*rpc.Conn, error) {
	conn, err := dialSession(ctx, url, cfg, cred, h, "agent", agentID)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Call(ctx, "map/agents/register", map[string]string{"agentId": agentID, "name": agentID}); err != nil {
		closeConns([]*rpc.Conn{conn})
		return nil, fmt.Errorf("register agent %s on %s: %w", agentID, url, err)
	}
	return conn, nil
}

// closeConns closes every non-nil connection and waits for their
// goroutines to end.
func closeConns(conns []*rpc.Conn) {
	for _, c := range conns {
		if c != nil {
			_ = c.Close("bench done")
		}
	}
	for _, c := range conns {
		if c != nil {
			<-c.Done()
		}
	}
}

// parallel runs f(0..n-1) on at most width goroutines and returns the
// first error (the others still run to completion).
func parallel(n, width int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// runID names one run's agents so that runs against the same cluster, or
// several load generators at once, do not collide.
func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// pick spreads item i over the URLs round-robin.
func pick(urls []string, i int) string { return urls[i%len(urls)] }

// mustJSON is for values built here that always encode.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("benchload: encode %T: %v", v, err))
	}
	return b
}
