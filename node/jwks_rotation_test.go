package node_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/acl"
)

// TestNode_JWKSURLRotation: a node verifying bearer tokens against an
// https JWKS rotates keys without a restart: a token of a newly published
// key connects at once (unknown kid re-fetch), and the open session of a
// withdrawn key is told and closed (periodic refresh).
func TestNode_JWKSURLRotation(t *testing.T) {
	keys := map[string]ed25519.PrivateKey{}
	for _, k := range []string{"k1", "k2"} {
		_, keys[k], _ = ed25519.GenerateKey(rand.Reader)
	}
	var mu sync.Mutex
	published := []string{"k1"}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var set jose.JSONWebKeySet
		for _, k := range published {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: keys[k].Public(), KeyID: k, Algorithm: string(jose.EdDSA), Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := func(kid string) string {
		sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: keys[kid]}, (&jose.SignerOptions{}).WithHeader("kid", kid))
		s, _ := jwt.Signed(sig).Claims(jwt.Claims{Subject: "alice", Issuer: "https://idp", Audience: jwt.Audience{"concord"},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
		return s
	}

	cfg := node.DevConfig(t.TempDir())
	secure(&cfg)
	cfg.ACL.JWT = &acl.JWTConfig{JWKSURL: srv.URL + "/jwks", JWKSCAFile: caFile, Issuer: "https://idp", Audience: "concord",
		JWKSRefresh: 100 * time.Millisecond, JWKSMinRefetch: time.Millisecond}
	cfg.MAP.AuthRevokeGrace = 100 * time.Millisecond
	n := startConfig(t, cfg)

	revoked := make(chan json.RawMessage, 1)
	old := dialWith(t, n, notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/auth/revoked" {
			revoked <- params
		}
	}))
	connect := func(c *client, kid string) error {
		return tryCall(c, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "client",
			"auth": map[string]any{"method": "bearer", "credential": token(kid)}})
	}
	if err := connect(old, "k1"); err != nil {
		t.Fatal(err)
	}
	if err := connect(dial(t, n), "k2"); err == nil {
		t.Fatal("a token of an unpublished key connected")
	}
	mu.Lock()
	published = []string{"k2"} // rotate: k2 in, k1 withdrawn
	mu.Unlock()
	if err := connect(dial(t, n), "k2"); err != nil {
		t.Fatalf("token of the new key refused: %v", err)
	}
	select {
	case p := <-revoked:
		var got struct{ Reason string }
		_ = json.Unmarshal(p, &got)
		if got.Reason != "credential_revoked" {
			t.Fatalf("map/auth/revoked %s", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session of the withdrawn key was not told")
	}
	select {
	case <-old.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session of the withdrawn key is still open")
	}
}
