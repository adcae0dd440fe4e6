package clustertest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/concordmap/concord/node/acl"
)

// Harness credentials: every cluster trusts its own token issuer (an
// Ed25519 key whose JWKS file the nodes load, as an operator configures
// --jwt-jwks-file), and Connect authenticates every participant with a
// bearer token from it. The suites thus run with authentication on; only
// the agent and client types may also connect anonymously, as on --dev.
const (
	harnessIssuer   = "https://clustertest.invalid"
	harnessAudience = "concord-clustertest"
)

// Issuer signs bearer tokens for a test cluster.
type Issuer struct {
	priv ed25519.PrivateKey
	// JWKSFile is the public key set the nodes verify tokens with.
	JWKSFile string
}

// NewIssuer creates a key pair and writes its JWKS under t.TempDir().
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("clustertest: issuer key: %v", err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "clustertest", Algorithm: string(jose.EdDSA), Use: "sig"}}}
	b, _ := json.Marshal(set)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatalf("clustertest: write JWKS: %v", err)
	}
	return &Issuer{priv: priv, JWKSFile: file}
}

// JWTConfig is the node side of the issuer.
func (i *Issuer) JWTConfig() *acl.JWTConfig {
	return &acl.JWTConfig{JWKSFile: i.JWKSFile, Issuer: harnessIssuer, Audience: harnessAudience, Leeway: time.Minute}
}

// Flags are the `concord server` flags trusting the issuer.
func (i *Issuer) Flags() []string {
	return []string{"--jwt-jwks-file", i.JWKSFile, "--jwt-issuer", harnessIssuer, "--jwt-audience", harnessAudience,
		"--allow-anonymous", "agent,client"}
}

// Token returns a token for subject allowing participant ids matching
// pattern and the given participant types (all four when none given),
// valid for a day.
func (i *Issuer) Token(subject, pattern string, types ...string) string {
	if len(types) == 0 {
		types = []string{"agent", "client", "system", "gateway"}
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: i.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "clustertest"))
	if err != nil {
		panic(fmt.Sprintf("clustertest: signer: %v", err)) // static key and algorithm: cannot fail
	}
	now := time.Now()
	s, err := jwt.Signed(sig).Claims(jwt.Claims{Subject: subject, Issuer: harnessIssuer, Audience: jwt.Audience{harnessAudience},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(24 * time.Hour))}).
		Claims(map[string]any{"map:participantIdPattern": pattern, "map:participantTypes": types}).Serialize()
	if err != nil {
		panic(fmt.Sprintf("clustertest: sign: %v", err))
	}
	return s
}

// withAuth returns params with a bearer auth added when it has none.
func withAuth(params map[string]any, token string) map[string]any {
	if token == "" {
		return params
	}
	if _, ok := params["auth"]; ok {
		return params
	}
	out := make(map[string]any, len(params)+1)
	for k, v := range params {
		out[k] = v
	}
	out["auth"] = map[string]any{"method": "bearer", "token": token}
	return out
}
