package clustertest

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecrets_NotExposed: the gossip key reaches a `concord server` process
// only through --gossip-key-file, so even with --enable-debug neither
// /debug/pprof/cmdline, /v1/status, /v1/health nor the log shows it; and
// without --enable-debug there is no /debug at all.
func TestSecrets_NotExposed(t *testing.T) {
	pc := StartProcs(t, 2, WithProcArgs(func(i int) []string {
		if i == 0 {
			return []string{"--enable-debug"}
		}
		return nil
	}))
	p := pc.Proc(0)
	key, err := os.ReadFile(filepath.Join(filepath.Dir(p.Dir), "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	key = bytes.TrimSpace(key)
	if len(key) == 0 {
		t.Fatal("empty key file")
	}
	for _, path := range []string{"/debug/pprof/cmdline", "/v1/status", "/v1/health", "/v1/ready"} {
		code, body, err := httpGet(p.HTTPAddr, path)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
		if bytes.Contains(body, key) {
			t.Fatalf("GET %s shows the gossip key", path)
		}
		if path == "/debug/pprof/cmdline" && !bytes.Contains(body, []byte("--gossip-key-file")) {
			t.Fatalf("cmdline %q: want the key file flag in it", body)
		}
	}
	if code, _, err := httpGet(pc.Proc(1).HTTPAddr, "/debug/pprof/cmdline"); err != nil || code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/cmdline without --enable-debug: %d %v, want 404", code, err)
	}
	for _, q := range pc.Procs() {
		logs, err := os.ReadFile(q.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(logs), string(key)) {
			t.Fatalf("%s's log shows the gossip key", q)
		}
	}
}

// TestGossipKey_WrongKeyFailsFast starts a `concord server` process whose
// key file holds another key than the running cluster's: it exits within
// seconds, saying the gossip key is the problem and naming its key by
// fingerprint, instead of waiting out its ready timeout with "wait for 3
// servers: context deadline exceeded".
func TestGossipKey_WrongKeyFailsFast(t *testing.T) {
	pc := StartProcs(t, 3)
	dir := t.TempDir()
	keyOut, errOut, code := runCLI(t, "keygen")
	if code != 0 {
		t.Fatalf("keygen: %s", errOut)
	}
	keyFile := filepath.Join(dir, "other.key")
	if err := os.WriteFile(keyFile, []byte(keyOut), 0o600); err != nil {
		t.Fatal(err)
	}
	var seeds []string
	for _, p := range pc.Procs() {
		seeds = append(seeds, p.GossipAddr)
	}
	// A certificate of the system, so the key is the only thing wrong.
	tlsArgs, err := serverTLSArgs(dir, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*NodeReadyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ConcordBinary(t), append([]string{"server",
		"--node-id", "stranger", "--system-id", SystemID, "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", reservePort(t, false), "--grpc-addr", reservePort(t, false),
		"--raft-addr", reservePort(t, false), "--gossip-addr", reservePort(t, true),
		"--join", strings.Join(seeds, ","), "--gossip-key-file", keyFile}, tlsArgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the stranger's server: %v after %s, want it to exit with an error", err, took)
	}
	if took > scaled(15*time.Second) {
		t.Fatalf("the key error took %s", took)
	}
	for _, want := range []string{"gossip key mismatch", "cannot decrypt", "--gossip-key-file"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not mention %q:\n%s", want, tail2k(stderr.String()))
		}
	}
	t.Logf("the stranger with the wrong key exited after %s", took.Round(time.Millisecond))
}

func tail2k(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
