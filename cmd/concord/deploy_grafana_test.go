package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/concordmap/concord/node/rpc"
)

// alertRules is the Prometheus rule file format, decoded strictly.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// synthesized are series Prometheus makes itself, not a node.
var synthesized = []string{"up"}

var (
	metricName = regexp.MustCompile(`\b(?:concord|process|go)_[a-zA-Z0-9_:]+\b|\bup\b`) // metric names may hold upper case and colons
	// selector finds name{matchers} and each label="value" equality in it.
	selector = regexp.MustCompile(`\b((?:concord|process|go)_[a-zA-Z0-9_:]+)\{([^}]*)\}`)
	equality = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
)

// deployQueries returns every PromQL expression of the dashboard and the
// alert rules, by where it is.
func deployQueries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "concord-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out["dashboard panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	raw, err = os.ReadFile(filepath.Join(deployDir, "grafana", "concord-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := sigsyaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert rule %+v lacks alert, expr, severity or summary", r)
			}
			out["alert "+r.Alert] = r.Expr
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d queries found", len(out))
	}
	return out
}

// exposedSeries scrapes /metrics and returns metric name -> label sets.
func exposedSeries(t *testing.T, url string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		name, labels, _ := strings.Cut(series, "{")
		out[name] = append(out[name], labels)
	}
	return out
}

// TestDeploy_GrafanaMetricsExist starts a dev node, exercises it so every
// labelled series exists (a register, a send, a failing call), and requires
// every metric the dashboard and the alert rules use — and every
// label="value" they select on — to be on its /metrics.
func TestDeploy_GrafanaMetricsExist(t *testing.T) {
	queries := deployQueries(t)
	srv := startDevNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, srv.MAPURL(), rpc.DefaultClientConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close("test done"); <-conn.Done() })
	for _, c := range []struct {
		method string
		params any
	}{
		{"map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "probe"}},
		{"map/agents/register", map[string]any{"agentId": "probe"}},
		{"map/send", map[string]any{"to": map[string]any{"agent": "probe"}, "payload": map[string]any{"n": 1}}},
	} {
		if _, err := conn.Call(ctx, c.method, c.params); err != nil {
			t.Fatalf("%s: %v", c.method, err)
		}
	}
	if _, err := conn.Call(ctx, "map/agents/get", map[string]any{"agentId": "nobody"}); err == nil {
		t.Fatal("a call meant to fail succeeded")
	}
	// A federation link, so the per-link series exist: a MAP link to a
	// server that is not there (down, which is what the alert watches).
	link := newRootCmd()
	link.SetOut(io.Discard)
	link.SetArgs([]string{"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--addr", srv.GRPCAddr()})
	if err := link.ExecuteContext(ctx); err != nil {
		t.Fatalf("federation link: %v", err)
	}
	// The autopilot series come with the leader's first health report,
	// which follows its election closely.
	var series map[string][]string
	for deadline := time.Now().Add(10 * time.Second); ; {
		series = exposedSeries(t, "http://"+srv.HTTPAddr()+"/metrics")
		if _, ok := series["concord_autopilot_healthy"]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling for the first report
	}

	for where, expr := range queries {
		for _, name := range metricName.FindAllString(expr, -1) {
			if _, ok := series[name]; !ok && !slices.Contains(synthesized, name) {
				t.Errorf("%s uses %s, which a node does not export", where, name)
			}
		}
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			for _, eq := range equality.FindAllStringSubmatch(sel[2], -1) {
				label, value := eq[1], eq[2]
				if label == "job" || strings.Contains(sel[2], label+"!=") {
					continue
				}
				want := label + `="` + value + `"`
				if !slices.ContainsFunc(series[sel[1]], func(ls string) bool { return strings.Contains(ls, want) }) {
					t.Errorf("%s selects %s{%s}, which a node does not export", where, sel[1], want)
				}
			}
		}
	}
}
