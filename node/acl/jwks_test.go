package acl

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/concordmap/concord/node/rpc"
)

// issuer signs with any of its named Ed25519 keys and publishes a
// chosen subset of them as a JWKS.
type issuer struct {
	mu   sync.Mutex
	keys map[string]ed25519.PrivateKey
	pub  []string // kids published
}

func newIssuer(kids ...string) *issuer {
	is := &issuer{keys: map[string]ed25519.PrivateKey{}}
	for _, k := range kids {
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		is.keys[k] = priv
	}
	is.publish(kids...)
	return is
}

func (is *issuer) publish(kids ...string) {
	is.mu.Lock()
	is.pub = kids
	is.mu.Unlock()
}

func (is *issuer) jwks() []byte {
	is.mu.Lock()
	defer is.mu.Unlock()
	var set jose.JSONWebKeySet
	for _, k := range is.pub {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: is.keys[k].Public(), KeyID: k, Algorithm: string(jose.EdDSA), Use: "sig"})
	}
	b, _ := json.Marshal(set)
	return b
}

func (is *issuer) token(t *testing.T, kid string) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: is.keys[kid]},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jwt.Signed(sig).Claims(jwt.Claims{Subject: "alice", Issuer: "https://idp", Audience: jwt.Audience{"concord"},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func accepts(a *Authenticator, tok string) error {
	_, err := a.Authenticate(context.Background(), "bearer", tok)
	return err
}

func wantRefused(t *testing.T, err error) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeAuthFailed {
		t.Fatalf("got %v, want 1001", err)
	}
}

func waitFor(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runAuth(t *testing.T, a *Authenticator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestJWKSFileRotation(t *testing.T) {
	is := newIssuer("k1", "k2")
	is.publish("k1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	write := func() {
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, is.jwks(), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil { // atomic, as operators should
			t.Fatal(err)
		}
	}
	write()
	a, err := New(Config{JWT: &JWTConfig{JWKSFile: file, Issuer: "https://idp", Audience: "concord", JWKSFilePoll: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := accepts(a, is.token(t, "k1")); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, accepts(a, is.token(t, "k2")))

	t.Run("SIGHUP reload", func(t *testing.T) {
		is.publish("k1", "k2")
		write()
		if err := a.ReloadJWKS(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := accepts(a, is.token(t, "k2")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a broken file keeps the keys in use", func(t *testing.T) {
		if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := a.ReloadJWKS(context.Background()); err == nil {
			t.Fatal("broken JWKS accepted")
		}
		if err := accepts(a, is.token(t, "k2")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a changed file is picked up by the poll; sessions of a withdrawn key end", func(t *testing.T) {
		old, err := a.Authenticate(context.Background(), "bearer", is.token(t, "k1"))
		if err != nil || old.CredentialID != "k1" || a.Check(old) != nil {
			t.Fatalf("principal %+v err %v", old, err)
		}
		runAuth(t, a)
		is.publish("k2") // k1 retired
		write()
		waitRotated(t, a, is)
		wantRefused(t, a.Check(old))
		cur, err := a.Authenticate(context.Background(), "bearer", is.token(t, "k2"))
		if err != nil || a.Check(cur) != nil {
			t.Fatalf("current key's principal refused: %v", err)
		}
	})
}

// jwksServer serves the issuer's JWKS over TLS and counts the fetches;
// slow and huge make it misbehave.
type jwksServer struct {
	*httptest.Server
	fetches     atomic.Int64
	slow, huge  atomic.Bool
	caFile      string
	unblockSlow chan struct{}
}

func newJWKSServer(t *testing.T, is *issuer) *jwksServer {
	s := &jwksServer{unblockSlow: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		switch {
		case s.slow.Load():
			select {
			case <-s.unblockSlow:
			case <-r.Context().Done():
			}
			return
		case s.huge.Load():
			_, _ = w.Write([]byte(`{"keys":[` + strings.Repeat(" ", 2<<20) + `]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(is.jwks())
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-client case's handshake error
	s.StartTLS()
	t.Cleanup(func() { close(s.unblockSlow); s.Close() })
	s.caFile = filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	if err := os.WriteFile(s.caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWKSURL(t *testing.T) {
	is := newIssuer("k1", "k2", "k3")
	is.publish("k1")
	srv := newJWKSServer(t, is)
	cfg := func(mut func(*JWTConfig)) Config {
		c := &JWTConfig{JWKSURL: srv.URL + "/jwks.json", JWKSCAFile: srv.caFile, Issuer: "https://idp", Audience: "concord",
			JWKSMinRefetch: time.Hour, JWKSTimeout: 2 * time.Second}
		if mut != nil {
			mut(c)
		}
		return Config{JWT: c}
	}

	t.Run("config errors", func(t *testing.T) {
		for name, c := range map[string]Config{
			"http":           cfg(func(c *JWTConfig) { c.JWKSURL = strings.Replace(c.JWKSURL, "https", "http", 1) }),
			"file and url":   cfg(func(c *JWTConfig) { c.JWKSFile = "/x.json" }),
			"ca without url": {JWT: &JWTConfig{JWKSFile: "/x", JWKSCAFile: srv.caFile, Issuer: "i", Audience: "a"}},
			"bad ca":         cfg(func(c *JWTConfig) { c.JWKSCAFile = "/nonexistent.pem" }),
		} {
			if _, err := New(c); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	})
	t.Run("untrusted server: tokens refused, node starts", func(t *testing.T) {
		a, err := New(cfg(func(c *JWTConfig) { c.JWKSCAFile = "" }))
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, accepts(a, is.token(t, "k1")))
	})

	a, err := New(cfg(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := accepts(a, is.token(t, "k1")); err != nil {
		t.Fatal(err)
	}
	t.Run("unknown kid re-fetches (rotation at the issuer)", func(t *testing.T) {
		a, err := New(cfg(func(c *JWTConfig) { c.JWKSMinRefetch = time.Nanosecond }))
		if err != nil {
			t.Fatal(err)
		}
		is.publish("k1", "k2") // rotated at the issuer
		if err := accepts(a, is.token(t, "k2")); err != nil {
			t.Fatalf("rotated key: %v", err)
		}
	})
	t.Run("unknown kids inside the rate limit fetch nothing", func(t *testing.T) {
		before := srv.fetches.Load()
		for range 20 {
			wantRefused(t, accepts(a, is.token(t, "k3"))) // k3 is never published
		}
		if n := srv.fetches.Load() - before; n != 0 {
			t.Fatalf("%d fetches for unknown kids inside the rate limit", n)
		}
	})
	t.Run("oversized and slow answers keep the keys in use, in bounded time", func(t *testing.T) {
		srv.huge.Store(true)
		if err := a.ReloadJWKS(context.Background()); err == nil || !strings.Contains(err.Error(), "larger") {
			t.Fatalf("huge JWKS: %v", err)
		}
		srv.huge.Store(false)
		srv.slow.Store(true)
		start := time.Now()
		if err := a.ReloadJWKS(context.Background()); err == nil {
			t.Fatal("a hanging server answered")
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("fetch took %v despite a 2s timeout", d)
		}
		srv.slow.Store(false)
		if err := accepts(a, is.token(t, "k1")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("refreshed on the interval", func(t *testing.T) {
		a, err := New(cfg(func(c *JWTConfig) { c.JWKSRefresh = 10 * time.Millisecond }))
		if err != nil {
			t.Fatal(err)
		}
		runAuth(t, a)
		is.publish("k2") // k1 retired
		waitRotated(t, a, is)
	})
}

// waitRotated waits until a refuses the retired k1 and accepts k2.
func waitRotated(t *testing.T, a *Authenticator, is *issuer) {
	t.Helper()
	waitFor(t, func() error {
		if accepts(a, is.token(t, "k1")) == nil {
			return errors.New("retired key still accepted")
		}
		return nil
	})
	if err := accepts(a, is.token(t, "k2")); err != nil {
		t.Fatal(err)
	}
}

// TestJWKSURLSecretsNotShown: an issuer URL may carry a credential in its
// user info or query; neither reaches the logs or the errors.
func TestJWKSURLSecretsNotShown(t *testing.T) {
	is := newIssuer("k1")
	is.publish("k1")
	srv := newJWKSServer(t, is)
	var logs bytes.Buffer
	secretURL := strings.Replace(srv.URL, "https://", "https://alice:pw-s3cret@", 1) + "/jwks.json?api_key=q-s3cret"
	// No CA file: the server is untrusted, so the fetch fails and is logged.
	a, err := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), JWT: &JWTConfig{
		JWKSURL: secretURL, Issuer: "https://idp", Audience: "concord", JWKSTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	rerr := a.ReloadJWKS(context.Background())
	if rerr == nil {
		t.Fatal("an untrusted JWKS server was accepted")
	}
	for _, shown := range []string{logs.String(), rerr.Error()} {
		if strings.Contains(shown, "s3cret") {
			t.Fatalf("secret shown: %s", shown)
		}
		if !strings.Contains(shown, strings.TrimPrefix(srv.URL, "https://")) {
			t.Fatalf("the host is not named, so the operator cannot tell which issuer failed: %s", shown)
		}
	}
	if _, err := New(Config{JWT: &JWTConfig{JWKSURL: "http://u:pw-s3cret@h/x", Issuer: "i", Audience: "a"}}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad URL error: %v", err)
	}
}
