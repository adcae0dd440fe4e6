package clustertest

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
