package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
)

// TestBench_JSONSummaries runs each bench subcommand as a user would,
// against an in-process dev node, and checks the --json contract that
// scripts depend on.
func TestBench_JSONSummaries(t *testing.T) {
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	url := srv.MAPURL()

	tests := []struct {
		args []string
		keys []string
	}{
		{[]string{"bench", "write", "--url", url, "--clients", "2", "--duration", "1100ms", "--json"},
			[]string{"writes_per_sec", "p50_ms", "p90_ms", "p99_ms", "errors", "total"}},
		{[]string{"bench", "sessions", "--url", url, "--sessions", "20", "--settle", "0s", "--json"},
			[]string{"connect_per_sec", "elapsed_ms", "rss_bytes"}},
		{[]string{"bench", "send", "--url", url, "--url", url, "--pairs", "2", "--size", "128", "--duration", "1100ms", "--json"},
			[]string{"msgs_per_sec", "p50_ms", "p90_ms", "p99_ms", "lost", "duplicates", "reordered"}},
	}
	for _, tt := range tests {
		t.Run(tt.args[1], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			root := newRootCmd()
			root.SetArgs(tt.args)
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			if err := root.ExecuteContext(ctx); err != nil {
				t.Fatalf("%v: %v (stderr %s)", tt.args, err, stderr.String())
			}
			var got map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not one JSON object: %q: %v", stdout.String(), err)
			}
			for _, k := range tt.keys {
				if _, ok := got[k]; !ok {
					t.Errorf("summary lacks %q: %s", k, stdout.String())
				}
			}
			if tt.args[1] != "sessions" && !bytes.Contains(stderr.Bytes(), []byte(tt.args[1]+" ")) {
				t.Errorf("no progress line on stderr: %q", stderr.String())
			}
		})
	}
}
