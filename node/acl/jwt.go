package acl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// JWTConfig configures bearer-token (JWT) authentication.
type JWTConfig struct {
	// JWKSFile is a JSON Web Key Set file holding the issuer's public keys
	// (RSA, EC P-256 or Ed25519; symmetric keys are refused). Tokens must
	// name their key with "kid". The file is re-read when it changes
	// (polled every JWKSFilePoll) and on Reload (SIGHUP): keys rotate
	// without a restart. Exactly one of JWKSFile and JWKSURL is set.
	JWKSFile string
	// JWKSURL is an https URL serving the key set, fetched at start,
	// every JWKSRefresh, on Reload, and when a token names an unknown kid
	// (at most once per JWKSMinRefetch).
	JWKSURL string
	// JWKSCAFile, optional, is a PEM bundle of the CAs trusted for
	// JWKSURL (default: the system roots).
	JWKSCAFile string
	// JWKSRefresh, JWKSFilePoll, JWKSMinRefetch, JWKSTimeout and
	// JWKSMaxBytes bound the reloads; zero takes the Default* values.
	JWKSRefresh    time.Duration
	JWKSFilePoll   time.Duration
	JWKSMinRefetch time.Duration
	JWKSTimeout    time.Duration
	JWKSMaxBytes   int64
	// Issuer is the required "iss".
	Issuer string
	// Audience must be one of the token's "aud" values.
	Audience string
	// Leeway tolerates clock skew on exp/nbf/iat.
	Leeway time.Duration
}

// withDefaults fills zero bounds.
func (c JWTConfig) withDefaults() JWTConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.JWKSRefresh, DefaultJWKSRefresh)
	def(&c.JWKSFilePoll, DefaultJWKSFilePoll)
	def(&c.JWKSMinRefetch, DefaultJWKSMinRefetch)
	def(&c.JWKSTimeout, DefaultJWKSTimeout)
	if c.JWKSMaxBytes <= 0 {
		c.JWKSMaxBytes = DefaultJWKSMaxBytes
	}
	return c
}

// Claims beyond the registered ones (map-protocol.md §3.6). "sub" is the
// participant id unless map:participantIdPattern widens it.
type mapClaims struct {
	Types        []string                   `json:"map:participantTypes"`
	Pattern      string                     `json:"map:participantIdPattern"`
	Capabilities map[string]map[string]bool `json:"map:capabilities"`
	// Gateway allowlists (map/federation/route): the foreign systems a
	// gateway may route for and the systems it may route to.
	GatewaySources []string `json:"map:gatewaySources"`
	GatewayTargets []string `json:"map:gatewayTargets"`
}

// defaultJWTTypes are the participant types of a token without
// map:participantTypes: never system or gateway.
var defaultJWTTypes = []string{"agent", "client"}

// jwtAlgorithms are the only signature algorithms accepted: asymmetric,
// so every node verifies with public keys alone.
var jwtAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA}

// jwtVerifier checks bearer tokens against the current key set.
type jwtVerifier struct {
	cfg  JWTConfig
	keys *keySource
}

func newJWTVerifier(cfg JWTConfig, log *slog.Logger) (*jwtVerifier, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("acl: JWT issuer and audience are required")
	}
	cfg = cfg.withDefaults()
	ks, err := newKeySource(cfg, log)
	if err != nil {
		return nil, err
	}
	return &jwtVerifier{cfg: cfg, keys: ks}, nil
}

// parseJWKS keeps the public halves of the asymmetric keys that have a kid.
func parseJWKS(b []byte) (jose.JSONWebKeySet, error) {
	var in jose.JSONWebKeySet
	if err := json.Unmarshal(b, &in); err != nil {
		return in, err
	}
	var out jose.JSONWebKeySet
	for _, k := range in.Keys {
		if k.KeyID == "" || !k.Valid() {
			continue
		}
		pub := k.Public()
		if !pub.Valid() { // symmetric keys have no public half
			continue
		}
		out.Keys = append(out.Keys, pub)
	}
	if len(out.Keys) == 0 {
		return out, errors.New("no usable public key with a kid")
	}
	return out, nil
}

// errTokenExpired marks an expired token (answered 1002, refreshable).
var errTokenExpired = errors.New("token expired")

// verifiedToken is what a valid bearer token says.
type verifiedToken struct {
	sub, issuer string
	exp         time.Time
	kid         string // the JWKS key that signed it
	claims      mapClaims
}

// verify checks raw and returns what it says.
func (v *jwtVerifier) verify(ctx context.Context, raw string, now time.Time) (verifiedToken, error) {
	var out verifiedToken
	tok, err := jwt.ParseSigned(raw, jwtAlgorithms)
	if err != nil {
		return out, fmt.Errorf("parse: %w", err)
	}
	var std jwt.Claims
	kid := tok.Headers[0].KeyID
	if kid != "" && !v.keys.has(kid) {
		v.keys.refetchForKid(ctx, kid) // rotated at the issuer?
	}
	if err := tok.Claims(v.keys.Keys(), &std, &out.claims); err != nil {
		return out, fmt.Errorf("signature: %w", err)
	}
	if std.Expiry == nil {
		return out, errors.New("exp is required")
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Audience}, Time: now}, v.cfg.Leeway)
	mc := out.claims
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return out, errTokenExpired
	case err != nil:
		return out, err
	case std.Subject == "" || strings.Contains(std.Subject, "*"):
		return out, errors.New("sub is required and names one participant")
	case mc.Pattern != "" && !ValidPattern(mc.Pattern):
		return out, errors.New("map:participantIdPattern is not a pattern")
	}
	out.sub, out.issuer, out.exp, out.kid = std.Subject, std.Issuer, std.Expiry.Time(), kid
	return out, nil
}

// flattenCapabilities turns {"lifecycle":{"canStop":true}} into
// ["lifecycle.canStop"] (true flags only), sorted; nil when absent.
func flattenCapabilities(m map[string]map[string]bool) []string {
	if m == nil {
		return nil
	}
	out := []string{}
	for group, flags := range m {
		for flag, on := range flags {
			if on {
				out = append(out, group+"."+flag)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
