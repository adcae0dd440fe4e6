package registry

import (
	"bytes"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Validation of every command against the current state, separate from
// its mutation: Apply runs the check first (so a refused command changes
// nothing), and Check lets a proposer run the very same check against its
// local replica before proposing, so that a request refused there writes
// nothing to the Raft log. The local replica may be behind; the FSM's
// check is the one that counts.

// Check reports the domain error Apply would return for msg against the
// local replica's current state, or nil. It reads under the read lock and
// changes nothing. Command types without domain errors always pass.
func (s *State) Check(t concordv1.CommandType, msg proto.Message) error {
	c, ok := s.checks[t]
	if !ok {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return c(s.d, msg)
}

// checkFunc adapts a typed check to Check's table.
func checkFunc[M proto.Message](fn func(d *data, m M) error) func(*data, proto.Message) error {
	return func(d *data, msg proto.Message) error {
		m, ok := msg.(M)
		if !ok {
			return errf(CodeInvalidRequest, "", "unexpected command body %T", msg)
		}
		return fn(d, m)
	}
}

func checkAgentRegister(d *data, m *concordv1.AgentRegisterRequest) error {
	r := m.GetAgent()
	id := r.GetId()
	if id == "" {
		return errf(CodeInvalidParams, "agentId", "agent id is required")
	}
	if sid := r.GetSessionId(); sid != "" && d.sessions[sid] == nil {
		return errf(CodeInvalidRequest, "", "session %q not found", sid)
	}
	if ep := m.GetSessionEpoch(); ep != 0 {
		if se := d.sessions[r.GetSessionId()]; se == nil || se.epoch != ep {
			return errf(CodeExhausted, "sessionId", "session %q moved on since the registering connection attached at epoch %d", r.GetSessionId(), ep)
		}
	}
	if m.GetResumePersistentIdentity() && m.GetPersistentId() != "" && d.orphanByPersistentID(m.GetPersistentId()) != nil {
		return nil
	}
	if ex, ok := d.agents[id]; ok {
		if d.existingAllowed(ex, r) {
			return nil
		}
		return errf(CodeAgentExists, "", "agent %q already exists", id)
	}
	if p := r.GetParent(); p != "" && d.agents[p] == nil {
		return errf(CodeAgentNotFound, "parent", "parent agent %q not found", p)
	}
	for _, sc := range r.GetScopes() {
		if d.scopes[sc] == nil {
			return scopeNotFound(sc)
		}
	}
	if st := r.GetState(); st != "" && !ValidState(st) {
		return errf(CodeStateInvalid, "state", "invalid agent state %q", st)
	}
	return nil
}

// existingAllowed: see registerExisting.
func (d *data) existingAllowed(ex *agentEntry, r *concordv1.AgentRecord) bool {
	owner := r.GetOwnerId()
	switch {
	case owner == "":
		return false
	case ex.a.OwnerID == owner:
		return true
	case ex.a.OwnerID == "":
		prev := d.sessions[ex.a.SessionID]
		return prev == nil || prev.s.ParticipantID == owner
	}
	return false
}

// checkOrigin refuses a write a MAP connection proposed for its session
// (sid) at attach epoch ep once the session has left that epoch: resumed
// elsewhere, detached, closed or gone. ep 0 (an older proposer, or the
// system does not enforce FSMLevelSessionWrites yet) passes. It runs
// before the command's other checks: whatever else the write would meet,
// its connection is no longer the session's.
func checkOrigin(d *data, sid string, ep uint64) error {
	if ep == 0 {
		return nil
	}
	if se := d.sessions[sid]; se != nil && se.epoch == ep {
		return nil
	}
	return errf(CodeExhausted, "sessionId", "session %q moved on since the writing connection attached at epoch %d", sid, ep)
}

// CheckOrigin is checkOrigin for the writes applied by the state modules
// beside the registry (node/acl, node/runs; FSMLevelModuleSessionWrites):
// ErrSessionMoved once session sid has left attach epoch ep, nil for ep
// 0. Their Apply calls it on raft's FSM goroutine, which also applies the
// registry's entries, so every replica reads the session at the same
// point of the log.
func (s *State) CheckOrigin(sid string, ep uint64) error {
	if ep == 0 {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return checkOrigin(s.d, sid, ep)
}

// cursorCurrent reports whether a cursor its connection delivered at
// attach epoch ep may still move the session's cursor: the session was
// not attached again since (at ep, or one detach or close of that very
// connection later). ep 0 (older proposers) always may.
func cursorCurrent(e *sessionEntry, ep uint64) bool {
	return ep == 0 || e.epoch == ep || (e.epoch == ep+1 && !e.s.Connected)
}

func checkAgentUnregister(d *data, m *concordv1.AgentUnregisterRequest) error {
	if err := checkOrigin(d, m.GetOriginSessionId(), m.GetOriginSessionEpoch()); err != nil {
		return err
	}
	if d.agents[m.GetAgentId()] == nil {
		return agentNotFound(m.GetAgentId())
	}
	return nil
}

func checkAgentUpdate(d *data, m *concordv1.AgentUpdateRequest) error {
	if err := checkOrigin(d, m.GetOriginSessionId(), m.GetOriginSessionEpoch()); err != nil {
		return err
	}
	e, ok := d.agents[m.GetAgentId()]
	if !ok {
		return agentNotFound(m.GetAgentId())
	}
	if _, err := updateTarget(e.a.State, m); err != nil {
		return err
	}
	if m.GetSetOwner() {
		if sid := m.GetSessionId(); sid != "" && d.sessions[sid] == nil {
			return errf(CodeInvalidRequest, "", "session %q not found", sid)
		}
	}
	return nil
}

func checkSessionOpen(d *data, m *concordv1.SessionOpenRequest) error {
	r := m.GetSession()
	if r.GetId() == "" {
		return errf(CodeInvalidParams, "sessionId", "session id is required")
	}
	if b := r.GetDisconnectPolicy().GetAgentBehavior(); b != "" && !ValidBehavior(b) {
		return errf(CodeInvalidParams, "disconnectPolicy.agentBehavior", "unknown agent behavior %q", b)
	}
	if from := m.GetReclaimFromSessions(); len(from) > 0 && len(from) != len(m.GetReclaimAgents()) {
		return errf(CodeInvalidParams, "reclaimFromSessions", "%d sessions for %d agents to reclaim", len(from), len(m.GetReclaimAgents()))
	}
	e, exists := d.sessions[r.GetId()]
	if m.GetResume() {
		if !exists {
			return errf(CodeInvalidRequest, "sessionId", "session %q not found", r.GetId())
		}
		if len(e.s.ResumeTokenHash) > 0 && !bytes.Equal(e.s.ResumeTokenHash, r.GetResumeTokenHash()) {
			return errf(CodeAuthFailed, "resumeToken", "resume token does not match session %q", r.GetId())
		}
		if want := m.GetResumeFromEpoch(); want != 0 && e.epoch != want {
			return errf(CodeExhausted, "sessionId", "session %q moved on: epoch %d, the resume was decided at %d", r.GetId(), e.epoch, want)
		}
		return nil
	}
	if exists {
		return errf(CodeInvalidRequest, "sessionId", "session %q already exists", r.GetId())
	}
	if r.GetParticipantId() == "" {
		return errf(CodeInvalidParams, "participantId", "participant id is required")
	}
	return nil
}

func checkSessionExpire(_ *data, m *concordv1.SessionExpireRequest) error {
	if k := m.GetKind(); k != ExpireGrace && k != ExpireTTL {
		return errf(CodeInvalidParams, "kind", "unknown expiry kind %q", k)
	}
	return nil
}

func checkSubscriptionAdd(d *data, m *concordv1.SubscriptionAddRequest) error {
	r := m.GetSubscription()
	if r.GetId() == "" {
		return errf(CodeInvalidParams, "subscriptionId", "subscription id is required")
	}
	if err := checkOrigin(d, r.GetSessionId(), m.GetSessionEpoch()); err != nil {
		return err
	}
	e, ok := d.sessions[r.GetSessionId()]
	if !ok {
		return errf(CodeInvalidRequest, "sessionId", "session %q not found", r.GetSessionId())
	}
	if subIndex(&e.s, r.GetId()) >= 0 {
		return errf(CodeInvalidParams, "subscriptionId", "subscription %q already exists", r.GetId())
	}
	return nil
}

func checkSubscriptionRemove(d *data, m *concordv1.SubscriptionRemoveRequest) error {
	if err := checkOrigin(d, m.GetSessionId(), m.GetSessionEpoch()); err != nil {
		return err
	}
	e, ok := d.sessions[m.GetSessionId()]
	if !ok {
		return errf(CodeInvalidRequest, "sessionId", "session %q not found", m.GetSessionId())
	}
	if subIndex(&e.s, m.GetSubscriptionId()) < 0 {
		return errf(CodeInvalidParams, "subscriptionId", "subscription %q not found", m.GetSubscriptionId())
	}
	return nil
}

func checkScopeCreate(d *data, m *concordv1.ScopeCreateRequest) error {
	if err := checkOrigin(d, m.GetOriginSessionId(), m.GetOriginSessionEpoch()); err != nil {
		return err
	}
	r := m.GetScope()
	id := r.GetId()
	if id == "" {
		return errf(CodeInvalidParams, "scopeId", "scope id is required")
	}
	if _, ok := d.scopes[id]; ok {
		return errf(CodeInvalidParams, "scopeId", "scope %q already exists", id)
	}
	if p := r.GetParent(); p != "" {
		if p == id {
			return errf(CodeInvalidParams, "parent", "a scope cannot be its own parent")
		}
		if d.scopes[p] == nil {
			return errf(CodeScopeNotFound, "parent", "parent scope %q not found", p)
		}
	}
	return nil
}

func checkScopeDelete(d *data, m *concordv1.ScopeDeleteRequest) error {
	if err := checkOrigin(d, m.GetOriginSessionId(), m.GetOriginSessionEpoch()); err != nil {
		return err
	}
	id := m.GetScopeId()
	if _, ok := d.scopes[id]; !ok {
		return scopeNotFound(id)
	}
	if d.hasChildScopes(id) {
		return errf(CodeInvalidRequest, "scopeId", "scope %q has child scopes", id)
	}
	return nil
}

func checkScopeJoin(d *data, m *concordv1.ScopeJoinRequest) error {
	if err := checkOrigin(d, m.GetOriginSessionId(), m.GetOriginSessionEpoch()); err != nil {
		return err
	}
	_, _, err := d.lookupMembership(m.GetScopeId(), m.GetAgentId())
	return err
}

func checkScopeLeave(d *data, m *concordv1.ScopeLeaveRequest) error {
	if err := checkOrigin(d, m.GetOriginSessionId(), m.GetOriginSessionEpoch()); err != nil {
		return err
	}
	_, _, err := d.lookupMembership(m.GetScopeId(), m.GetAgentId())
	return err
}
