package mapsvc

import (
	"errors"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// Credential lifecycle of open sessions (map-protocol.md §3.6). A session
// keeps the Principal it authenticated with; on every node, the sweep
// tells its participant:
//   - map/auth/expiring {expiresAt, refreshBefore} once, AuthExpiryWarning
//     before the credential expires, so the client calls map/auth/refresh;
//   - map/auth/revoked {reason, message, gracePeriodMs} when it expired
//     ("token_expired") or its API key was revoked ("credential_revoked",
//     applied from Raft on every node), and closes the connection when
//     AuthRevokeGrace has passed.
//
// From that moment every call but map/auth/refresh and map/disconnect
// answers 1002 (expired) or 1001 (revoked); a refresh with a valid
// credential of the same principal lifts an expiry.

// Reasons of map/auth/revoked.
const (
	revokedExpired = "token_expired"
	revokedRevoked = "credential_revoked"
)

// exemptFromRevocation are the methods a session whose credential ended
// may still call: to renew it, or to leave.
var exemptFromRevocation = map[string]bool{"map/auth/refresh": true, "map/disconnect": true}

// credentialRefusal returns the error a call gets from a session whose
// credential ended, or nil. An expiry not yet seen by the sweep counts.
func (s *Service) credentialRefusal(cs *connState) error {
	if cs.revoked != nil {
		return cs.revoked
	}
	if p := cs.principal; p != nil && p.ExpiresAt > 0 && s.now() >= p.ExpiresAt {
		return credentialExpired()
	}
	return nil
}

func credentialExpired() *rpc.Error {
	return rpc.NewError(rpc.CodeTokenExpired, "Credential expired: call map/auth/refresh with a new one or reconnect").
		WithDetails(map[string]any{"authError": "expired"})
}

func credentialRevoked() *rpc.Error {
	return rpc.NewError(rpc.CodeAuthFailed, "Credential revoked: reconnect with another credential").
		WithDetails(map[string]any{"authError": "invalid_credentials", "reason": "revoked"})
}

// closeReason is the WebSocket close reason (status 1008) of a session
// whose credential ended: the MAP code and what happened, short enough
// for a close frame.
func closeReason(refusal *rpc.Error) string {
	if refusal.Code == rpc.CodeTokenExpired {
		return "MAP error 1002: credential expired"
	}
	return "MAP error 1001: credential revoked"
}

// credentialsChanged returns the checker's change channel, nil (never
// ready) without one.
func (s *Service) credentialsChanged() <-chan struct{} {
	if c, ok := s.auth.(CredentialChecker); ok {
		return c.Changed()
	}
	return nil
}

// checkCredentials runs the lifecycle above over this node's sessions.
func (s *Service) checkCredentials() {
	checker, _ := s.auth.(CredentialChecker)
	now := s.now()
	s.sessions.each(func(_ string, a *attached) { s.checkSession(a, checker, now) })
}

func (s *Service) checkSession(a *attached, checker CredentialChecker, now int64) {
	st := a.state
	st.mu.Lock()
	p, revokedAt, warned := st.principal, st.revokedAt, st.warnedExpiry
	st.mu.Unlock()
	if p == nil || p.Anonymous() {
		return
	}
	grace := s.cfg.AuthRevokeGrace.Milliseconds()
	if revokedAt > 0 {
		if now >= revokedAt+grace {
			st.mu.Lock()
			refusal := st.revoked
			st.mu.Unlock()
			if refusal != nil { // not lifted by a refresh meanwhile
				_ = a.conn.ClosePolicy(closeReason(refusal))
			}
		}
		return
	}
	var refusal *rpc.Error
	reason := ""
	if checker != nil {
		if err := checker.Check(p); err != nil {
			refusal, reason = credentialRevoked(), revokedRevoked
			if re := (*rpc.Error)(nil); errors.As(err, &re) && re.Code == rpc.CodeTokenExpired {
				refusal, reason = credentialExpired(), revokedExpired
			}
		}
	}
	if refusal == nil && p.ExpiresAt > 0 && now >= p.ExpiresAt {
		refusal, reason = credentialExpired(), revokedExpired
	}
	if refusal != nil {
		st.mu.Lock()
		if st.principal != p { // refreshed meanwhile: judge the new one next sweep
			st.mu.Unlock()
			return
		}
		st.revoked, st.revokedAt = refusal, now
		sid, pid := st.sessionID, st.participantID
		st.mu.Unlock()
		s.log.Info("credential ended; session told and closing", "session_id", sid, "participant_id", pid,
			"principal", p.ID, "reason", reason, "grace", s.cfg.AuthRevokeGrace)
		_ = a.conn.Notify("map/auth/revoked", map[string]any{
			"reason": reason, "message": refusal.Message, "gracePeriodMs": grace,
		})
		if grace == 0 {
			_ = a.conn.ClosePolicy(closeReason(refusal))
		}
		return
	}
	warn := s.cfg.AuthExpiryWarning.Milliseconds()
	if p.ExpiresAt > 0 && warned != p.ExpiresAt && now >= p.ExpiresAt-warn {
		st.mu.Lock()
		if st.principal == p {
			st.warnedExpiry = p.ExpiresAt
		}
		st.mu.Unlock()
		_ = a.conn.Notify("map/auth/expiring", map[string]any{
			"expiresAt": p.ExpiresAt, "refreshBefore": max(now, p.ExpiresAt-warn/2),
		})
	}
}

// nextCredentialDeadline returns how long until the earliest expiry
// warning, expiry or grace end among this node's sessions (capped by
// limit), so the sweep wakes on time rather than a tick late.
func (s *Service) nextCredentialDeadline(limit time.Duration) time.Duration {
	now := s.now()
	next := now + limit.Milliseconds()
	warn, grace := s.cfg.AuthExpiryWarning.Milliseconds(), s.cfg.AuthRevokeGrace.Milliseconds()
	s.sessions.each(func(_ string, a *attached) {
		a.state.mu.Lock()
		p, revokedAt, warned := a.state.principal, a.state.revokedAt, a.state.warnedExpiry
		a.state.mu.Unlock()
		switch {
		case revokedAt > 0:
			next = min(next, revokedAt+grace)
		case p == nil || p.ExpiresAt == 0:
		case warned != p.ExpiresAt:
			next = min(next, p.ExpiresAt-warn)
		default:
			next = min(next, p.ExpiresAt)
		}
	})
	return time.Duration(max(next-now, 1)) * time.Millisecond
}

// liftRevocation clears an expiry after a successful refresh.
func (st *connState) liftRevocation() {
	st.mu.Lock()
	st.revoked, st.revokedAt, st.warnedExpiry = nil, 0, 0
	st.mu.Unlock()
}
