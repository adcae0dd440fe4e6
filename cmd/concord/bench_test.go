package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
)

// TestBench_JSONSummaries runs each bench subcommand as a user would,
// against an in-process dev node, and checks the --json contract that
// scripts depend on.
func TestBench_JSONSummaries(t *testing.T) {
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = testLogger(t)
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
	prof := filepath.Join(t.TempDir(), "bench.pprof")

	tests := []struct {
		args []string
		keys []string
	}{
		{[]string{"bench", "write", "--url", url, "--clients", "2", "--duration", "1100ms", "--json"},
			[]string{"writes_per_sec", "p50_ms", "p90_ms", "p99_ms", "errors", "total"}},
		{[]string{"bench", "sessions", "--url", url, "--sessions", "20", "--settle", "0s", "--json", "--cpu-profile", prof},
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
	// --cpu-profile wrote the generator's profile (gzipped protobuf).
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--cpu-profile left %d bytes (%v), want a gzipped profile", len(b), err)
	}
}

// TestBench_OverTLS: against a TLS node, the bench connects with wss://
// and reads the node's memory over https, verifying with --ca-file and
// presenting an operator certificate (/v1/status needs a credential).
func TestBench_OverTLS(t *testing.T) {
	dir := makeTLSMaterial(t)
	// The bench's sessions are anonymous: this node admits them explicitly.
	srv := startTLSNode(t, dir, "--allow-anonymous", "agent,client")
	ca := filepath.Join(dir, "sys-ca.pem")
	out, stderr, err := execRootStdout(t, "bench", "sessions", "--url", srv.MAPURL(), "--ca-file", ca,
		"--cert-file", filepath.Join(dir, "sys-client-ops.pem"), "--key-file", filepath.Join(dir, "sys-client-ops-key.pem"), "--sessions", "5", "--settle", "0s", "--json")
	if err != nil {
		t.Fatalf("bench sessions over TLS: %v\n%s%s", err, out, stderr)
	}
	var got struct {
		Connected int64 `json:"connected"`
		RSSBytes  int64 `json:"rss_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Connected != 5 || got.RSSBytes <= 0 {
		t.Fatalf("summary %s (%v): want 5 sessions and the node's RSS", out, err)
	}
	if _, err := execRoot(t, "bench", "sessions", "--url", srv.MAPURL(), "--sessions", "1", "--settle", "0s"); err == nil {
		t.Fatal("bench without --ca-file trusted the node's private CA")
	}
}

// TestBench_WithCredential: against a node that refuses anonymous
// participants, every bench subcommand works with an API key read from
// --credential-file, and fails without one.
func TestBench_WithCredential(t *testing.T) {
	dir := makeTLSMaterial(t)
	srv := startTLSNode(t, dir) // no --allow-anonymous
	ops := []string{"--ca-file", filepath.Join(dir, "sys-ca.pem"),
		"--cert-file", filepath.Join(dir, "sys-client-ops.pem"), "--key-file", filepath.Join(dir, "sys-client-ops-key.pem")}
	// The key alone is on stdout; the "created API key" note goes to stderr.
	out, stderr, err := execRootStdout(t, append([]string{"acl", "token", "create", "--participant", "bench-*", "--types", "agent,client",
		"--addr", srv.GRPCAddr()}, ops...)...)
	key := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(key, "map_sk_") {
		t.Fatalf("acl token create: %v\n%s%s", err, out, stderr)
	}
	tokFile := filepath.Join(dir, "bench.key")
	if err := os.WriteFile(tokFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONCORD_CREDENTIAL_FILE", "")
	url := srv.MAPURL()
	for _, args := range [][]string{
		{"bench", "write", "--url", url, "--clients", "2", "--duration", "500ms", "--json"},
		{"bench", "send", "--url", url, "--pairs", "1", "--duration", "500ms", "--json"},
		{"bench", "sessions", "--url", url, "--sessions", "3", "--settle", "0s", "--json"},
	} {
		t.Run(args[1], func(t *testing.T) {
			base := append(slices.Clone(args), ops...) // the operator certificate reads /v1/status
			out, _, err := execRootStdout(t, base...)
			var anon struct{ Connected, Errors int }
			_ = json.Unmarshal([]byte(out), &anon)
			if err == nil && (anon.Connected != 0 || anon.Errors == 0) {
				t.Fatalf("anonymous bench %s was admitted: %s", args[1], out)
			}
			if err != nil && !strings.Contains(err.Error(), "1000") {
				t.Fatalf("anonymous bench %s: %v, want a 1000 refusal", args[1], err)
			}
			out, stderr, err := execRootStdout(t, append(base, "--credential-file", tokFile)...)
			if err != nil {
				t.Fatalf("bench %s with an API key: %v\n%s%s", args[1], err, out, stderr)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("summary %q: %v", out, err)
			}
			if n, _ := got["errors"].(float64); n != 0 {
				t.Fatalf("errors in %s", out)
			}
		})
	}
}

// TestBench_AnonymousSessionLimit: bench sessions from one address against
// an anonymous node stops being admitted past --anonymous-session-burst,
// counts the refusals as errors with the 4001 in first_error, and opens
// them all with a credential.
func TestBench_AnonymousSessionLimit(t *testing.T) {
	dir := makeTLSMaterial(t)
	srv := startTLSNode(t, dir, "--allow-anonymous", "agent,client",
		"--anonymous-session-burst", "3", "--anonymous-session-rate", "0.001")
	ops := []string{"--ca-file", filepath.Join(dir, "sys-ca.pem"),
		"--cert-file", filepath.Join(dir, "sys-client-ops.pem"), "--key-file", filepath.Join(dir, "sys-client-ops-key.pem")}
	t.Setenv("CONCORD_CREDENTIAL_FILE", "")
	bench := append([]string{"bench", "sessions", "--url", srv.MAPURL(), "--sessions", "6", "--concurrency", "1", "--settle", "0s", "--json"}, ops...)
	out, stderr, err := execRootStdout(t, bench...)
	if err != nil {
		t.Fatalf("anonymous bench sessions: %v\n%s%s", err, out, stderr)
	}
	var anon struct {
		Connected, Errors int
		FirstError        string `json:"first_error"`
	}
	if err := json.Unmarshal([]byte(out), &anon); err != nil || anon.Connected != 3 || anon.Errors != 3 || !strings.Contains(anon.FirstError, "4001") {
		t.Fatalf("summary %s (%v): want 3 connected, 3 refused with 4001", out, err)
	}

	out, stderr, err = execRootStdout(t, append([]string{"acl", "token", "create", "--participant", "bench-*", "--types", "client",
		"--addr", srv.GRPCAddr()}, ops...)...)
	key := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(key, "map_sk_") {
		t.Fatalf("acl token create: %v\n%s%s", err, out, stderr)
	}
	tokFile := filepath.Join(dir, "bench.key")
	if err := os.WriteFile(tokFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, err = execRootStdout(t, append(bench, "--credential-file", tokFile)...)
	var authed struct{ Connected, Errors int }
	if err != nil || json.Unmarshal([]byte(out), &authed) != nil || authed.Connected != 6 || authed.Errors != 0 {
		t.Fatalf("bench sessions with an API key: %v\n%s%s", err, out, stderr)
	}
}

// makeTLSMaterial creates system "sys"'s CA, node n1's server certificate
// and operator "ops"'s client certificate in a temporary directory.
func makeTLSMaterial(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"tls", "ca", "create", "--system-id", "sys", "--dir", dir},
		{"tls", "cert", "create", "--server", "--system-id", "sys", "--node-id", "n1", "--dir", dir},
		{"tls", "cert", "create", "--client", "--system-id", "sys", "--name", "ops", "--dir", dir},
	} {
		if out, err := execRoot(t, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	return dir
}
