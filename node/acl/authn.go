package acl

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/rpc"
)

// Config configures an Authenticator. Start from DefaultConfig.
type Config struct {
	// Keys holds the API keys (the replicated module). nil disables the
	// api-key method.
	Keys *Module
	// JWT enables the bearer method with JWTs; nil disables it.
	JWT *JWTConfig
	// AnonymousTypes are the participant types allowed to connect with
	// auth method none. Empty refuses anonymous participants (1000). It
	// may not include system or gateway: those always need a credential.
	AnonymousTypes []string
	// Now is the clock for expiry checks; nil means time.Now.
	Now func() time.Time
	// Logger receives JWKS reload outcomes; nil discards.
	Logger *slog.Logger
}

// DefaultConfig refuses anonymous participants and has no methods yet.
func DefaultConfig() Config { return Config{} }

// Validate reports the first invalid field.
func (c Config) Validate() error {
	for _, t := range c.AnonymousTypes {
		if t != "agent" && t != "client" {
			return fmt.Errorf("acl: anonymous participants may be agent or client, not %q", t)
		}
	}
	if c.JWT != nil && c.JWT.Leeway < 0 {
		return errors.New("acl: JWT leeway must be >= 0")
	}
	return nil
}

// Authenticator implements mapsvc.Authenticator.
type Authenticator struct {
	cfg Config
	jwt *jwtVerifier
}

var (
	_ mapsvc.Authenticator     = (*Authenticator)(nil)
	_ mapsvc.CredentialChecker = (*Authenticator)(nil)
)

// New validates cfg, loads the JWKS file if bearer is enabled, and
// returns the Authenticator.
func New(cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{cfg: cfg}
	if cfg.JWT != nil {
		v, err := newJWTVerifier(*cfg.JWT, cfg.Logger.With("component", "acl"))
		if err != nil {
			return nil, err
		}
		a.jwt = v
	}
	return a, nil
}

// Methods implements mapsvc.Authenticator.
func (a *Authenticator) Methods() []string {
	var m []string
	if a.jwt != nil {
		m = append(m, mapsvc.AuthBearer)
	}
	if a.cfg.Keys != nil {
		m = append(m, mapsvc.AuthAPIKey)
	}
	if len(a.cfg.AnonymousTypes) > 0 {
		m = append(m, mapsvc.AuthNone)
	}
	return m
}

// Authenticate implements mapsvc.Authenticator. Errors never include the
// credential.
func (a *Authenticator) Authenticate(ctx context.Context, method, credential string) (*mapsvc.Principal, error) {
	switch {
	case method == mapsvc.AuthNone && len(a.cfg.AnonymousTypes) > 0:
		return &mapsvc.Principal{ID: "anonymous", Method: mapsvc.AuthNone, Types: slices.Clone(a.cfg.AnonymousTypes)}, nil
	case method == mapsvc.AuthNone:
		return nil, rpc.NewError(rpc.CodeAuthRequired, "Authentication required").WithDetails(map[string]any{
			"authError": "auth_required", "authRequired": map[string]any{"methods": a.Methods(), "required": true}})
	case method == mapsvc.AuthAPIKey && a.cfg.Keys != nil:
		return a.apiKey(credential)
	case method == mapsvc.AuthBearer && a.jwt != nil:
		return a.bearer(ctx, credential)
	}
	return nil, rpc.NewError(rpc.CodeMethodNotSupported, "Auth method not supported").
		WithDetails(map[string]any{"authError": "method_not_supported", "method": method, "supported": a.Methods()})
}

func invalidCredentials(reason string) *rpc.Error {
	return rpc.NewError(rpc.CodeAuthFailed, "Invalid credentials").
		WithDetails(map[string]any{"authError": "invalid_credentials", "reason": reason})
}

func expired() *rpc.Error {
	return rpc.NewError(rpc.CodeTokenExpired, "Credential expired").WithDetails(map[string]any{"authError": "expired"})
}

func (a *Authenticator) apiKey(token string) (*mapsvc.Principal, error) {
	id, hash, err := ParseKey(token)
	if err != nil {
		return nil, invalidCredentials("malformed API key")
	}
	k, ok := a.cfg.Keys.Key(id)
	if !ok || subtle.ConstantTimeCompare(hash, k.GetSecretSha256()) != 1 {
		return nil, invalidCredentials("unknown or revoked API key")
	}
	if exp := k.GetExpiresMs(); exp > 0 && a.cfg.Now().UnixMilli() >= exp {
		return nil, expired()
	}
	p := &mapsvc.Principal{ID: "key:" + id, CredentialID: id, Method: mapsvc.AuthAPIKey, ExpiresAt: k.GetExpiresMs(),
		ParticipantIDPattern: k.GetParticipantIdPattern(), Types: slices.Clone(k.GetParticipantTypes()),
		GatewaySources: slices.Clone(k.GetGatewaySources()), GatewayTargets: slices.Clone(k.GetGatewayTargets())}
	if len(k.GetCapabilities()) > 0 {
		p.Capabilities = slices.Clone(k.GetCapabilities())
	}
	return p, nil
}

func (a *Authenticator) bearer(ctx context.Context, token string) (*mapsvc.Principal, error) {
	vt, err := a.jwt.verify(ctx, token, a.cfg.Now())
	if errors.Is(err, errTokenExpired) {
		return nil, expired()
	}
	if err != nil {
		return nil, invalidCredentials("invalid bearer token")
	}
	mc := vt.claims
	p := &mapsvc.Principal{ID: vt.sub, CredentialID: vt.kid, Method: mapsvc.AuthBearer, Issuer: vt.issuer, ExpiresAt: vt.exp.UnixMilli(),
		ParticipantIDPattern: vt.sub, Types: defaultJWTTypes, Capabilities: flattenCapabilities(mc.Capabilities),
		GatewaySources: mc.GatewaySources, GatewayTargets: mc.GatewayTargets}
	if mc.Pattern != "" {
		p.ParticipantIDPattern = mc.Pattern
	}
	if mc.Types != nil {
		p.Types = mc.Types
	}
	return p, nil
}

// Check implements mapsvc.CredentialChecker: an API-key principal is
// valid while its key is still stored (not revoked) and not expired; a
// bearer principal while the JWKS still holds the key that signed its
// token (an issuer that withdraws a key withdraws its tokens); both end
// at their expiry, which the service tracks.
func (a *Authenticator) Check(p *mapsvc.Principal) error {
	if p.Method == mapsvc.AuthBearer && a.jwt != nil {
		if p.CredentialID != "" && !a.jwt.keys.has(p.CredentialID) {
			return invalidCredentials("signing key withdrawn from the JWKS")
		}
		return nil
	}
	if p.Method != mapsvc.AuthAPIKey || a.cfg.Keys == nil {
		return nil
	}
	k, ok := a.cfg.Keys.Key(p.CredentialID)
	if !ok {
		return invalidCredentials("API key revoked")
	}
	if exp := k.GetExpiresMs(); exp > 0 && a.cfg.Now().UnixMilli() >= exp {
		return expired()
	}
	return nil
}

// Changed implements mapsvc.CredentialChecker.
func (a *Authenticator) Changed() <-chan struct{} {
	if a.cfg.Keys == nil {
		return nil
	}
	return a.cfg.Keys.Changed()
}

// Run keeps the JWKS current (file changes, URL refresh) until ctx ends;
// without bearer authentication it just waits. The node runs it.
func (a *Authenticator) Run(ctx context.Context) error {
	if a.jwt == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return a.jwt.keys.Run(ctx)
}

// ReloadJWKS re-reads the JWKS file or re-fetches the URL now (SIGHUP);
// on error the keys in use stay. Without bearer authentication it does
// nothing.
func (a *Authenticator) ReloadJWKS(ctx context.Context) error {
	if a.jwt == nil {
		return nil
	}
	return a.jwt.keys.Reload(ctx)
}
