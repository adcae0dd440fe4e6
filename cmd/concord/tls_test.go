package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
)

// TestTLSCommands_ClusterAdminOverTLS creates a CA, a server and an
// operator certificate with `concord tls`, starts a node with them, and
// calls the admin API the way an operator does: with the operator
// certificate, with the token, and refused without either.
func TestTLSCommands_ClusterAdminOverTLS(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"tls", "ca", "create", "--system-id", "sys", "--dir", dir},
		{"tls", "cert", "create", "--server", "--system-id", "sys", "--node-id", "n1", "--dir", dir},
		{"tls", "cert", "create", "--client", "--system-id", "sys", "--name", "alice", "--dir", dir},
	} {
		if out, err := execRoot(t, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	if _, err := execRoot(t, "tls", "ca", "create", "--system-id", "sys", "--dir", dir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second CA create: err = %v, want a refusal to overwrite", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sys-ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v %v, want 0600", fi.Mode(), err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	tokenFile := f("token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startTLSNode(t, dir, "--operator-token-file", tokenFile)
	if !strings.HasPrefix(srv.MAPURL(), "wss://") {
		t.Fatalf("MAP URL %s, want wss://", srv.MAPURL())
	}
	addr := srv.GRPCAddr()
	for _, tc := range []struct {
		name   string
		args   []string
		errHas string
	}{
		{"operator certificate", []string{"--ca-file", f("sys-ca.pem"), "--cert-file", f("sys-client-alice.pem"), "--key-file", f("sys-client-alice-key.pem")}, ""},
		{"operator token", []string{"--ca-file", f("sys-ca.pem"), "--token-file", tokenFile}, ""},
		{"no credential", []string{"--ca-file", f("sys-ca.pem")}, "Unauthenticated"},
		{"plaintext to a TLS port", nil, "Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execRoot(t, append([]string{"raft", "peers", "--addr", addr}, tc.args...)...)
			if tc.errHas == "" {
				if err != nil || !strings.Contains(out, "n1") {
					t.Fatalf("raft peers: %v\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("raft peers: err = %v, want %s", err, tc.errHas)
			}
		})
	}
}

// TestTLS_SIGHUPReloadsCertificate: a new certificate written in place
// is served to new handshakes after SIGHUP, without a restart.
func TestTLS_SIGHUPReloadsCertificate(t *testing.T) {
	dir := t.TempDir()
	f := func(name string) string { return filepath.Join(dir, name) }
	create := func() {
		t.Helper()
		for _, args := range [][]string{
			{"tls", "cert", "create", "--server", "--system-id", "sys", "--node-id", "n1", "--dir", dir},
		} {
			if out, err := execRoot(t, args...); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
		}
	}
	if _, err := execRoot(t, "tls", "ca", "create", "--system-id", "sys", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	create()
	srv := startTLSNode(t, dir)
	stop := reloadOnHangup(srv, slog.New(slog.DiscardHandler))
	defer stop()
	served := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", srv.HTTPAddr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the served cert
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	if err := os.Remove(f("sys-server-n1.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f("sys-server-n1-key.pem")); err != nil {
		t.Fatal(err)
	}
	create()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for served() == before {
		if time.Now().After(deadline) {
			t.Fatal("the old certificate is still served after SIGHUP")
		}
		time.Sleep(20 * time.Millisecond) // the signal is handled on its own goroutine
	}
}

// startTLSNode starts node n1 of system "sys" with the certificates
// `concord tls` wrote into dir, from `concord server` flags plus extra.
func startTLSNode(t *testing.T, dir string, extra ...string) *node.Server {
	t.Helper()
	f := func(name string) string { return filepath.Join(dir, name) }
	cfg, err := serverConfig(t, append([]string{"--node-id", "n1", "--system-id", "sys", "--data-dir", t.TempDir(), "--bootstrap",
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--tls-ca-file", f("sys-ca.pem"), "--tls-cert-file", f("sys-server-n1.pem"), "--tls-key-file", f("sys-server-n1-key.pem")}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.GossipKey = make([]byte, 32)
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestServerFlags_SecureByDefault: outside --dev a server needs TLS
// material or an explicit --insecure.
func TestServerFlags_SecureByDefault(t *testing.T) {
	base := []string{"--node-id", "n1", "--data-dir", t.TempDir()}
	if _, err := serverConfig(t, base...); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("no TLS: err = %v, want a refusal naming --insecure", err)
	}
	cfg, err := serverConfig(t, append(base, "--insecure")...)
	if err != nil || !cfg.Insecure || !cfg.GossipPlaintext {
		t.Fatalf("--insecure: %v insecure=%v gossip plaintext=%v", err, cfg.Insecure, cfg.GossipPlaintext)
	}
	if cfg, err := serverConfig(t, "--dev"); err != nil || !cfg.Insecure {
		t.Fatalf("--dev: %v insecure=%v", err, cfg.Insecure)
	}
	if _, err := serverConfig(t, append(base, "--insecure", "--http-client-auth", "sometimes")...); err == nil {
		t.Fatal("bad --http-client-auth accepted")
	}
}
