package mapsvc

import (
	"context"
	"slices"
	"strings"

	"github.com/concordmap/concord/node/rpc"
)

// Auth methods of map/connect's auth.method (map-protocol.md §3.6).
const (
	AuthNone   = "none"
	AuthBearer = "bearer"
	AuthAPIKey = "api-key"
)

// Principal is who a credential proves the caller to be, and what it
// allows. The Authenticator builds it; the service binds the session's
// participant id, type and capabilities to it.
type Principal struct {
	// ID is the principal's id reported in map/connect's result
	// (principal.id): the JWT subject, the API key id, or "anonymous".
	ID string
	// Method is the auth method that proved it.
	Method string
	// Issuer is the JWT issuer, if any.
	Issuer string
	// ExpiresAt is when the credential expires (ms since the epoch), 0
	// for never.
	ExpiresAt int64
	// ParticipantIDPattern is the participant ids the principal may use:
	// an exact id, a prefix ending in "*", or "*". "" means any id that
	// no other participant holds (the anonymous rule).
	ParticipantIDPattern string
	// Types are the participant types it allows.
	Types []string
	// Capabilities, when non-nil, lists the capability flags it allows
	// ("lifecycle.canStop", ...); the type's defaults are narrowed to them.
	Capabilities []string
	// GatewaySources are the foreign systems a gateway participant may
	// route for (map/federation/route envelope sources), GatewayTargets
	// the systems it may route to; "*" allows any, empty none.
	GatewaySources, GatewayTargets []string
	// CredentialID names the stored credential that proved it (the API
	// key id), so that a CredentialChecker can tell when it is revoked.
	CredentialID string
}

// Anonymous reports whether the principal carries no credential.
func (p *Principal) Anonymous() bool { return p.Method == AuthNone }

// Authenticator checks map/connect credentials. It returns an *rpc.Error
// with 1000 (a credential is required), 1001 (it is invalid), 1002
// (expired) or 1005 (method not supported) when it refuses. method is
// "none" when the connect carries no auth.
type Authenticator interface {
	Authenticate(ctx context.Context, method, credential string) (*Principal, error)
	// Methods lists the auth methods offered, in preference order, for
	// authRequired details.
	Methods() []string
}

// CredentialChecker is implemented by an Authenticator whose credentials
// can be revoked while sessions that used them are open (API keys). The
// service re-checks every open session's principal on each sweep and on
// every change Changed announces.
type CredentialChecker interface {
	// Check returns nil while p's credential is still valid, else why not
	// (an *rpc.Error: 1001 revoked, 1002 expired).
	Check(p *Principal) error
	// Changed returns a channel closed at the next change of the stored
	// credentials (a revoke applied from Raft, on every node).
	Changed() <-chan struct{}
}

// openAuthenticator is used when Config.Authenticator is nil: anonymous
// participants of every type (in-process tests and embedded uses).
type openAuthenticator struct{}

func (openAuthenticator) Authenticate(_ context.Context, method, _ string) (*Principal, error) {
	if method != AuthNone {
		return nil, rpc.NewError(rpc.CodeMethodNotSupported, "Auth method not supported").
			WithDetails(map[string]any{"method": method, "supported": []string{AuthNone}})
	}
	return &Principal{ID: "anonymous", Method: AuthNone, Types: []string{TypeAgent, TypeClient, TypeSystem, TypeGateway},
		GatewaySources: []string{"*"}, GatewayTargets: []string{"*"}}, nil
}
func (openAuthenticator) Methods() []string { return []string{AuthNone} }

// bindPrincipal checks a connect against its principal: the participant
// type must be allowed, the participant id must match the principal's
// pattern, and an anonymous participant cannot take an id another
// participant holds (an open session, or agents it owns). It returns the
// participant id to use ("" = generate one).
func (s *Service) bindPrincipal(p *Principal, cp *connectParams, resuming bool) (string, error) {
	if !slices.Contains(p.Types, cp.participantType) {
		return "", permissionDenied("the credential does not allow participantType " + cp.participantType)
	}
	pid := cp.participantID
	pattern := p.ParticipantIDPattern
	switch {
	case pattern == "":
		if pid != "" && !resuming && s.participantHeld(pid) {
			return "", authFailed("participantId " + pid + " is held by another participant; resume with its resumeToken")
		}
	case pid == "" && !strings.HasSuffix(pattern, "*"):
		pid = pattern // the credential names exactly one participant
	case pid == "":
		// A generated id inside the credential's namespace.
		pid = strings.TrimSuffix(pattern, "*") + cp.participantType + "-" + strings.ToLower(s.newID())
	case !MatchPattern(pattern, pid):
		return "", authFailed("participantId " + pid + " is not allowed by the credential")
	}
	return pid, nil
}

// participantHeld reports whether a participant id is in use: an open
// session has it, or an agent is owned by it.
func (s *Service) participantHeld(pid string) bool {
	for _, sess := range s.reg.Sessions() {
		if sess.ParticipantID == pid && sess.ClosedAt == 0 {
			return true
		}
	}
	for _, a := range s.reg.Agents() {
		if a.OwnerID == pid {
			return true
		}
	}
	return false
}

// MatchPattern reports whether participant id matches pattern: an exact
// id, or a prefix ending in "*" ("*" matches every id).
func MatchPattern(pattern, id string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(id, prefix)
	}
	return pattern == id
}

// authRequired is the 1000 answer to a connect without a credential.
func (s *Service) authRequired() *rpc.Error {
	return rpc.NewError(rpc.CodeAuthRequired, "Authentication required").WithDetails(map[string]any{
		"authError":    "auth_required",
		"authRequired": map[string]any{"methods": s.auth.Methods(), "required": true},
	})
}
