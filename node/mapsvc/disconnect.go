package mapsvc

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

type sessionInfo struct {
	ID           string `json:"id"`
	CreatedAt    int64  `json:"createdAt"`
	LastActiveAt int64  `json:"lastActiveAt,omitempty"`
	ClosedAt     int64  `json:"closedAt,omitempty"`
}

// disconnect serves map/disconnect: the session is closed (its agents
// handled per its disconnect policy), stays resumable with the returned
// resumeToken until DetachedSessionTTL, and the connection goes back to
// the not-connected state (it is not closed: the client closes it).
func (s *Service) disconnect(ctx context.Context, c *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	reason := p.str("reason")
	if err := p.err(); err != nil {
		return nil, err
	}
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE, &concordv1.SessionCloseRequest{
		Meta:      s.meta(cs.participantID, 1+len(s.reg.SessionAgents(cs.sessionID))),
		SessionId: cs.sessionID, Reason: reason, Epoch: cs.epoch,
		TtlMs: s.cfg.DetachedSessionTTL.Milliseconds(),
	})
	if err != nil {
		return nil, err
	}
	dr := res.(registry.DetachResult)
	s.release(c, cs.sessionID)
	info := sessionInfo{ID: cs.sessionID}
	if dr.Applied {
		info.CreatedAt, info.LastActiveAt, info.ClosedAt = dr.Session.CreatedAt, dr.Session.LastActiveAt, dr.Session.ClosedAt
	}
	return map[string]any{"acknowledged": true, "session": info, "resumeToken": cs.resumeToken}, nil
}

// release forgets the connection's session locally: off the session table
// (if this connection still holds it), subscriptions detached, connection
// state reset.
func (s *Service) release(c *rpc.Conn, sid string) {
	if s.sessions.remove(sid, c) && s.cfg.Fanout != nil {
		s.cfg.Fanout.Detach(sid)
	}
	if st := stateOf(c); st != nil {
		st.reset()
	}
}

// authRefresh serves map/auth/refresh. The three input shapes
// ({refreshToken}, {credential}, {token}, map-protocol.md §3.6) are
// accepted. The new credential (method: the session's unless given) must
// prove the same principal and still allow the session's participant id
// and type; the session then carries its expiry. An anonymous session has
// nothing to refresh: 1005.
func (s *Service) authRefresh(ctx context.Context, c *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	tok := p.str("refreshToken")
	if tok == "" {
		tok = p.str("credential")
	}
	if tok == "" {
		tok = p.str("token")
	}
	method := p.str("method")
	if err := p.err(); err != nil {
		return nil, err
	}
	if tok == "" {
		return nil, rpc.InvalidParams("refreshToken", "is required (or credential, or token)")
	}
	old := cs.principal
	if old == nil || old.Anonymous() {
		return nil, rpc.NewError(rpc.CodeMethodNotSupported, "Token refresh is not supported: the session authenticated with method none").
			WithDetails(map[string]any{"method": method, "supported": s.auth.Methods()})
	}
	if method == "" {
		method = old.Method
	}
	pr, err := s.auth.Authenticate(ctx, method, tok)
	if err != nil {
		s.log.Info("map/auth/refresh refused", "auth_method", method, "principal", old.ID, "err", err)
		return nil, err
	}
	switch {
	case pr.ID != old.ID:
		return nil, authFailed("the credential belongs to another principal")
	case !slices.Contains(pr.Types, cs.participantType):
		return nil, permissionDenied("the credential does not allow participantType " + cs.participantType)
	case pr.ParticipantIDPattern != "" && !MatchPattern(pr.ParticipantIDPattern, cs.participantID):
		return nil, authFailed("the credential does not allow participantId " + cs.participantID)
	}
	if st := stateOf(c); st != nil {
		if cs.revoked != nil && old.Method == AuthAPIKey && cs.revoked.Code != rpc.CodeTokenExpired {
			return nil, cs.revoked // a revoked key is not renewed in place; a bearer session may present a new token
		}
		st.mu.Lock()
		st.principal = pr
		st.mu.Unlock()
		st.liftRevocation()
	}
	s.log.Info("map/auth/refresh", "auth_method", method, "principal", pr.ID, "participant_id", cs.participantID)
	return map[string]any{"success": true, "accessToken": tok, "expiresAt": pr.ExpiresAt, "principal": principalOf(pr)}, nil
}

// Closed implements rpc.Handler: the connection is gone. Its session is
// released locally and SESSION_DETACH is proposed with the connection's
// attach epoch (a stale detach, after the session moved, is a no-op in the
// registry and is not even proposed when the local replica already shows
// a newer epoch).
func (s *Service) Closed(c *rpc.Conn) {
	st := stateOf(c)
	if st == nil {
		return
	}
	cs := st.snapshot()
	sid, epoch := cs.sessionID, cs.epoch
	if sid == "" {
		sid, epoch = cs.pendingSession, cs.pendingEpoch
	}
	if sid == "" {
		return
	}
	s.release(c, sid)
	if cur, ok := s.reg.SessionEpoch(sid); ok && cur > epoch {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
	defer cancel()
	_, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH, &concordv1.SessionDetachRequest{
		Meta:      s.meta(cs.participantID, 1+len(s.reg.SessionAgents(sid))),
		SessionId: sid, Epoch: epoch, Reason: "connection closed", HomeNode: s.cfg.NodeID,
		TtlMs: s.cfg.DetachedSessionTTL.Milliseconds(),
	})
	if err != nil {
		// This node's orphan pass (detachOrphans) retries after
		// OrphanGrace, unless a resume comes first.
		s.log.Warn("detach session failed", "session_id", sid, "err", err)
	}
}

// ReconnectNotification is the notification a node sends every connection
// before it closes them with WebSocket 1012 because it is being drained
// (concord operator drain). Its params are {reason, nodeId, nodes:
// [{nodeId, url}]}: the MAP URLs of the other nodes, where the client
// resumes its session (map/connect with sessionId and resumeToken).
const ReconnectNotification = "x-concord/reconnect"
