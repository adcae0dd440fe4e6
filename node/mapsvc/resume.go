package mapsvc

import (
	"context"
	"errors"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// resumeRetries bounds how often a live resume is proposed again after
// the session moved on between this replica's read and the apply
// (registry.ErrSessionMoved): a detach or resume committed meanwhile.
const resumeRetries = 2

// resume proposes the re-attachment of an existing session to this node.
// Once every server enforces it, the proposal quotes the epoch read here
// (resume_from_epoch): should this request fail before the proposal
// commits (its forward cut off, the client told to retry), the proposal
// may still reach the log later, and must then be refused instead of
// taking the session from a resume that succeeded elsewhere meanwhile.
// While the request is live its client still wants the session, so a
// refusal (this replica read an older epoch, or another attach committed
// first) makes it catch up and propose again, a few times.
func (s *Service) resume(ctx context.Context, c *rpc.Conn, st *connState, cp *connectParams, sid string, caps Capabilities) (any, error) {
	defer s.sessions.beginOpen(sid)() // until attach put it in the table (detachOrphans)
	for attempt := 0; ; attempt++ {
		sr, err := s.proposeResume(ctx, st, cp, sid)
		if err == nil {
			return s.attach(ctx, c, st, sr, cp.participantType, caps, cp.resumeToken)
		}
		if attempt == resumeRetries || !errors.Is(err, registry.ErrSessionMoved) || ctx.Err() != nil {
			return nil, err
		}
		s.log.Debug("resume refused: the session moved on since this replica read it; retrying", "session_id", sid, "attempt", attempt+1, "err", err)
		if err := s.awaitCommitted(ctx, err); err != nil {
			return nil, err
		}
	}
}

// proposeResume proposes one resume of sid, quoting the epoch this replica
// shows when the system enforces resume_from_epoch.
func (s *Service) proposeResume(ctx context.Context, st *connState, cp *connectParams, sid string) (registry.SessionResult, error) {
	sess, ok := s.reg.Session(sid)
	if !ok {
		// Expired since resumeTarget read it: connect opens afresh.
		return registry.SessionResult{}, &registry.Error{Code: registry.CodeInvalidRequest, Field: "sessionId", Message: "session " + sid + " not found"}
	}
	epoch, _ := s.reg.SessionEpoch(sid)
	rec := &concordv1.SessionRecord{Id: sid, HomeNode: s.cfg.NodeID, ResumeTokenHash: hashToken(cp.resumeToken)}
	if cp.policy != nil {
		rec.DisconnectPolicy = registry.PolicyRecord(s.fillPolicy(*cp.policy))
	}
	req := &concordv1.SessionOpenRequest{
		Meta: s.meta(sess.ParticipantID, 1+len(cp.reclaim)), Session: rec, Resume: true, ReclaimAgents: cp.reclaim,
	}
	if s.fsmLevel(ctx) >= registry.FSMLevelResumeEpoch {
		req.ResumeFromEpoch = epoch
		if len(cp.reclaim) > 0 {
			req.ReclaimFromSessions = s.agentSessions(cp.reclaim)
		}
	}
	st.mu.Lock()
	st.pendingSession, st.pendingEpoch = sid, epoch+1
	st.mu.Unlock()
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, req)
	if err != nil {
		return registry.SessionResult{}, err
	}
	return res.(registry.SessionResult), nil
}

// agentSessions returns the session of each agent as this replica shows
// it ("" for none, or an unknown agent): a connect's reclaim_from_sessions.
// A reclaim that reaches the log late (its client told to retry) then
// leaves alone the agents its client reclaimed elsewhere since.
func (s *Service) agentSessions(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if a, ok := s.reg.Agent(id); ok {
			out[i] = a.SessionID
		}
	}
	return out
}

// fsmLevel is Config.FSMLevel, 0 without one.
func (s *Service) fsmLevel(ctx context.Context) int {
	if s.cfg.FSMLevel == nil {
		return 0
	}
	return s.cfg.FSMLevel(ctx)
}

// awaitCommitted waits until this replica has applied the command a
// refusal (err, a committed command's domain error) came from, so that a
// read after it sees what refused it.
func (s *Service) awaitCommitted(ctx context.Context, err error) error {
	var ce *raftstore.CommandError
	if s.cfg.WaitApplied == nil || !errors.As(err, &ce) {
		return nil
	}
	return s.cfg.WaitApplied(ctx, ce.Index)
}

// origin is the session and attach epoch a write made for the connection
// cs quotes (origin_session_id, origin_session_epoch): should the request
// fail before its proposal commits (its forward held, the client told the
// outcome is unknown) and the session then move on (resumed elsewhere,
// detached, closed), a late commit is refused rather than applied behind
// the connection now holding the session. Nothing while some server does
// not enforce it (registry.FSMLevelSessionWrites): old behaviour.
func (s *Service) origin(ctx context.Context, cs *connState) (string, uint64) {
	return s.originAt(ctx, cs, registry.FSMLevelSessionWrites)
}

// originAt is origin for a write whose check arrived with FSM level
// level: the writes of the modules beside the registry
// (registry.FSMLevelModuleSessionWrites) quote it only from that level.
func (s *Service) originAt(ctx context.Context, cs *connState, level int) (string, uint64) {
	if cs.epoch == 0 || s.fsmLevel(ctx) < level {
		return "", 0
	}
	return cs.sessionID, cs.epoch
}
