package benchload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/benchload"
	"github.com/concordmap/concord/node/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startNode starts a dev node and stops it at cleanup.
func startNode(t *testing.T) *node.Server {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// jsonKeys encodes v and fails unless every key is present.
func jsonKeys(t *testing.T, v any, keys ...string) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("summary %s lacks %q", b, k)
		}
	}
	return m
}

func TestWrite_CommitsAgainstDevNode(t *testing.T) {
	srv := startNode(t)
	var progress bytes.Buffer
	cfg := benchload.DefaultWriteConfig()
	cfg.URLs = []string{srv.MAPURL(), srv.MAPURL()}
	cfg.Clients, cfg.Duration, cfg.Progress = 3, 1200*time.Millisecond, &progress
	res, err := benchload.Write(ctxFor(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total < 10 || res.Errors != 0 || res.WritesPerSec <= 0 {
		t.Fatalf("result %+v: want >= 10 writes, no errors", res)
	}
	if !(0 < res.P50Ms && res.P50Ms <= res.P90Ms && res.P90Ms <= res.P99Ms) {
		t.Fatalf("percentiles out of order: %+v", res.Percentiles)
	}
	if !strings.Contains(progress.String(), "write ") {
		t.Fatalf("no progress line in %q", progress.String())
	}
	jsonKeys(t, res, "writes_per_sec", "p50_ms", "p90_ms", "p99_ms", "errors", "total")
}

func TestSessions_ReportsNodeMemory(t *testing.T) {
	srv := startNode(t)
	cfg := benchload.DefaultSessionsConfig()
	cfg.URLs = []string{srv.MAPURL()}
	cfg.Sessions, cfg.Settle = 50, 0
	res, err := benchload.Sessions(ctxFor(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 50 || res.Errors != 0 || res.ConnectPerSec <= 0 || res.ElapsedMs <= 0 {
		t.Fatalf("result %+v: want 50 sessions connected", res)
	}
	if res.RSSBytes <= 0 || res.RSSBeforeBytes <= 0 || len(res.Nodes) != 1 || res.Nodes[0].NodeID == "" {
		t.Fatalf("result %+v: want the node's RSS", res)
	}
	// Each session holds at least its connection's reader on the node.
	if res.Goroutines-res.GoroutinesBefore < 50 {
		t.Fatalf("goroutines %d -> %d with 50 sessions open", res.GoroutinesBefore, res.Goroutines)
	}
	jsonKeys(t, res, "connect_per_sec", "elapsed_ms", "rss_bytes")
}

func TestSend_CountsEveryMessage(t *testing.T) {
	srv := startNode(t)
	cfg := benchload.DefaultSendConfig()
	cfg.URLs = []string{srv.MAPURL(), srv.MAPURL()}
	cfg.Pairs, cfg.Size, cfg.Duration, cfg.Window = 3, 200, 800*time.Millisecond, 32
	res, err := benchload.Send(ctxFor(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent < 100 || res.Errors != 0 || res.Delivered != res.Sent || res.Received != res.Sent {
		t.Fatalf("result %+v: want every sent message delivered and received", res)
	}
	if res.Lost != 0 || res.Duplicates != 0 || res.Reordered != 0 {
		t.Fatalf("result %+v: want no loss, duplicate or reordering on one node", res)
	}
	if res.MsgsPerSec <= 0 || res.P50Ms <= 0 || res.P99Ms < res.P50Ms {
		t.Fatalf("result %+v: want a rate and latencies", res)
	}
	jsonKeys(t, res, "msgs_per_sec", "p50_ms", "p90_ms", "p99_ms", "lost", "duplicates", "reordered")
}

func TestConfigs_RejectBadValues(t *testing.T) {
	w := benchload.DefaultWriteConfig()
	s := benchload.DefaultSessionsConfig()
	s.URLs = []string{"ws://127.0.0.1:1/map"}
	s.Sessions = 0
	p := benchload.DefaultSendConfig()
	p.URLs = []string{"ws://127.0.0.1:1/map"}
	p.Window = 0
	for name, err := range map[string]error{
		"write without URL": w.Validate(),
		"zero sessions":     s.Validate(),
		"zero window":       p.Validate(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
