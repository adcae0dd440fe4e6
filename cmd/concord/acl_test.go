package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
)

func TestServerFlags_Auth(t *testing.T) {
	base := []string{"--node-id", "n1", "--data-dir", t.TempDir(), "--insecure"}
	tests := []struct {
		name   string
		args   []string
		anon   []string
		jwt    bool
		errHas string
	}{
		{name: "production: no anonymous participants", args: base},
		{name: "explicit narrow policy", args: append(base, "--allow-anonymous", "client"), anon: []string{"client"}},
		{name: "anonymous system refused", args: append(base, "--allow-anonymous", "system"), errHas: "not \"system\""},
		{name: "dev lets agents and clients in", args: []string{"--dev"}, anon: []string{"agent", "client"}},
		{name: "dev can be closed", args: []string{"--dev", "--allow-anonymous", ""}, anon: nil},
		{name: "jwt", args: append(base, "--jwt-jwks-file", "/x.json", "--jwt-issuer", "i", "--jwt-audience", "a"), jwt: true},
		{name: "jwt without audience", args: append(base, "--jwt-jwks-file", "/x.json", "--jwt-issuer", "i"), errHas: "--jwt-audience"},
		{name: "jwks url", args: append(base, "--jwt-jwks-url", "https://idp/jwks", "--jwt-jwks-ca-file", "/ca.pem", "--jwt-issuer", "i", "--jwt-audience", "a"), jwt: true},
		{name: "jwks file and url", args: append(base, "--jwt-jwks-url", "https://idp/jwks", "--jwt-jwks-file", "/x.json", "--jwt-issuer", "i", "--jwt-audience", "a"), errHas: "exclude"},
		{name: "jwks ca without url", args: append(base, "--jwt-jwks-file", "/x.json", "--jwt-jwks-ca-file", "/ca.pem", "--jwt-issuer", "i", "--jwt-audience", "a"), errHas: "needs --jwt-jwks-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := serverConfig(t, tt.args...)
			if err == nil {
				err = cfg.ACL.Validate()
			}
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.ACL.AnonymousTypes, tt.anon) || (cfg.ACL.JWT != nil) != tt.jwt {
				t.Fatalf("anonymous %v jwt %v", cfg.ACL.AnonymousTypes, cfg.ACL.JWT)
			}
		})
	}
}

// TestACLTokenCommands runs create, list and revoke against a dev node.
func TestACLTokenCommands(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()

	run := func(args ...string) (string, error) {
		root := newRootCmd()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append(args, "--addr", addr))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	token, err := run("acl", "token", "create", "--participant", "ops-*", "--types", "system,client", "--description", "ci")
	if err != nil || !strings.HasPrefix(token, "map_sk_") {
		t.Fatalf("create: %q %v", token, err)
	}
	if _, err := run("acl", "token", "create", "--participant", "x", "--types", "root"); err == nil {
		t.Fatal("unknown participant type accepted")
	}
	list, err := run("acl", "token", "list")
	id := strings.TrimSpace(token)[len("map_sk_") : len("map_sk_")+26]
	if err != nil || !strings.Contains(list, id) || !strings.Contains(list, "ops-*") || strings.Contains(list, token[len("map_sk_")+27:]) {
		t.Fatalf("list: %q %v", list, err)
	}
	if _, err := run("acl", "token", "revoke", id); err != nil {
		t.Fatal(err)
	}
	if _, err := run("acl", "token", "revoke", id); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("second revoke: %v", err)
	}
}

// TestClientCredentialFile: `concord argue` connects with the credential
// in --credential-file to a node that admits no anonymous participants,
// and is refused without it.
func TestClientCredentialFile(t *testing.T) {
	cfg := node.DevConfig(t.TempDir())
	cfg.ACL.AnonymousTypes = nil
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	create := newRootCmd()
	var key bytes.Buffer
	create.SetOut(&key)
	create.SetErr(io.Discard)
	create.SetArgs([]string{"acl", "token", "create", "--participant", "*", "--types", "client", "--addr", srv.GRPCAddr()})
	if err := create.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, key.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// The refused connect is given 2 s; the admitted one as long as a
	// loaded machine needs (a connect opens a session: a Raft write).
	run := func(timeout string, args ...string) error {
		root := newRootCmd()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"argue", "list", "--server", srv.MAPURL(), "--connect-timeout", timeout}, args...))
		return root.ExecuteContext(ctx)
	}
	t.Setenv("CONCORD_CREDENTIAL", "")
	if err := run("2s"); err == nil {
		t.Fatal("connected anonymously to a node that requires a credential")
	}
	if err := run("20s", "--credential-file", file); err != nil {
		t.Fatalf("with the API key: %v", err)
	}
}
