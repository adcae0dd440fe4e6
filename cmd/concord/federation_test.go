package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
)

// devNodeCLI starts a dev node on a free gRPC port and returns a runner of
// CLI commands against it (--addr appended), with their stdout.
func devNodeCLI(ctx context.Context, t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := node.DevConfig(t.TempDir())
	cfg.GRPCAddr = addr
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return func(args ...string) (string, error) {
		root := newRootCmd()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append(args, "--addr", addr))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
}

// TestFederationLink_KindMap: `federation link --kind map` stores a link
// whose token list/status never print, and refuses bad flag sets before
// calling the node.
func TestFederationLink_KindMap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := devNodeCLI(ctx, t)
	const secret = "map_sk_very_secret_value"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no url":           {"federation", "link", "--kind", "map", "--system-id", "ext"},
		"no system id":     {"federation", "link", "--kind", "map", "--url", "ws://127.0.0.1:1/map"},
		"token with map":   {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--token", "x"},
		"unknown kind":     {"federation", "link", "--kind", "mesh"},
		"bad auth method":  {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--auth-token-file", keyFile, "--auth-method", "basic"},
		"http url":         {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "http://127.0.0.1:1/map"},
		"missing file":     {"federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://127.0.0.1:1/map", "--auth-token-file", keyFile + ".none"},
		"concord no token": {"federation", "link"},
	} {
		if _, err := run(args...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	out, err := run("federation", "link", "--kind", "map", "--system-id", "ext", "--url", "ws://user:pw@127.0.0.1:1/map?k=v",
		"--auth-method", "api-key", "--auth-token-file", keyFile, "--export", "all")
	if err != nil || !strings.Contains(out, "linked to MAP system ext") {
		t.Fatalf("link: %q %v", out, err)
	}
	for _, cmd := range []string{"list", "status"} {
		out, err := run("federation", cmd)
		if err != nil || !strings.Contains(out, "ext") || !strings.Contains(out, "map") {
			t.Fatalf("%s: %q %v", cmd, out, err)
		}
		if strings.Contains(out, secret) || strings.Contains(out, "pw@") || strings.Contains(out, "k=v") {
			t.Fatalf("%s prints a secret: %q", cmd, out)
		}
	}
	if out, err := run("federation", "unlink", "ext"); err != nil || !strings.Contains(out, "unlinked ext") {
		t.Fatalf("unlink: %q %v", out, err)
	}
}
