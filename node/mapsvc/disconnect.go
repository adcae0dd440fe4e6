package mapsvc

import (
	"context"
	"encoding/json"

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
	res, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE, &concordv1.SessionCloseRequest{
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
// accepted, but this node only supports auth method "none", which issues
// no credentials: there is nothing to refresh, so the answer is 1005
// METHOD_NOT_SUPPORTED (-32602 when no credential field is given).
func (s *Service) authRefresh(_ context.Context, _ *rpc.Conn, _ *connState, raw json.RawMessage) (any, error) {
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
	if method == "" {
		method = "none"
	}
	return nil, rpc.NewError(rpc.CodeMethodNotSupported, "Token refresh is not supported: sessions use auth method none").
		WithDetails(map[string]any{"method": method, "supported": []string{"none"}})
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
		// The leader's NodeAlive sweep (if configured) or a later resume
		// recovers; nothing else can be done from a closed connection.
		s.log.Warn("detach session failed", "session_id", sid, "err", err)
	}
}
