package registry

import (
	"bytes"
	"slices"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applyAgentRegister handles COMMAND_TYPE_AGENT_REGISTER.
func (s *State) applyAgentRegister(tx *txn, m *concordv1.AgentRegisterRequest) (any, error) {
	r := m.GetAgent()
	d := tx.d
	id := r.GetId()
	if m.GetResumePersistentIdentity() && m.GetPersistentId() != "" {
		if e := d.orphanByPersistentID(m.GetPersistentId()); e != nil {
			return tx.reclaimByIdentity(e, r), nil
		}
	}
	if ex, ok := d.agents[id]; ok {
		return tx.registerExisting(ex, r), nil
	}
	scopes := sortedUnique(r.GetScopes())
	state := r.GetState()
	if state == "" {
		state = StateRegistered
	}

	a := agentFromRecord(r)
	a.State = ""
	setState(&a, state, "", tx.ts)
	a.Lifecycle.CreatedAt = tx.ts
	a.Scopes = d.withAutoJoin(scopes, a.Role)
	d.putAgent(&agentEntry{a: a, persistentID: m.GetPersistentId()})
	for _, sc := range a.Scopes {
		d.addMember(sc, id)
	}
	regID := tx.emitData(EventAgentRegistered, registeredData(&a), []string{id}, a.Scopes)
	for _, sc := range a.Scopes {
		tx.emitData(EventScopeMemberJoined, memberData(sc, id), []string{id}, []string{sc}, regID)
	}
	return RegisterResult{Agent: copyAgent(&a)}, nil
}

// registerExisting decides a register for an id that is already taken.
// The SDK repeats map/agents/register for its own agent after a resume or
// a reconnect, so it must succeed (returning the existing agent, whose
// fields are kept) when:
//   - the agent already belongs to the registering session and owner;
//   - it belongs to the same participant through another session (a
//     reconnect whose old session is still attached somewhere): it moves;
//   - it is orphaned, and its last session is gone or was the same
//     participant's: it is reclaimed.
//
// Any other owner makes the register fail with AGENT_EXISTS.
func (tx *txn) registerExisting(ex *agentEntry, r *concordv1.AgentRecord) RegisterResult {
	owner, sid := r.GetOwnerId(), r.GetSessionId()
	switch {
	case ex.a.OwnerID == owner && ex.a.SessionID == sid:
		if ex.a.HomeNode != r.GetHomeNode() {
			a := tx.reclaim(ex, owner, sid, r.GetHomeNode(), "re-homed")
			return RegisterResult{Agent: a, Existing: true}
		}
		return RegisterResult{Agent: copyAgent(&ex.a), Existing: true}
	case ex.a.OwnerID == owner:
		prev := ex.a.SessionID
		a := tx.reclaim(ex, owner, sid, r.GetHomeNode(), "moved to a new session")
		return RegisterResult{Agent: a, Existing: true, PreviousSessionID: prev}
	default: // orphaned (checkAgentRegister allowed it)
		a := tx.reclaim(ex, owner, sid, r.GetHomeNode(), "reclaimed by register")
		return RegisterResult{Agent: a, Existing: true, Resumed: true, PreviousSessionID: ex.a.SessionID}
	}
}

// withAutoJoin adds the scopes whose autoJoinRoles list role.
func (d *data) withAutoJoin(scopes []string, role string) []string {
	if role == "" {
		return scopes
	}
	out := slices.Clone(scopes)
	for _, id := range sortedKeys(d.scopes) {
		if slices.Contains(d.scopes[id].AutoJoinRoles, role) {
			out = append(out, id)
		}
	}
	return sortedUnique(out)
}

// orphanByPersistentID returns the orphaned agent with that persistent id
// (lowest agent id if several), or nil.
func (d *data) orphanByPersistentID(pid string) *agentEntry {
	for _, id := range sortedKeys(d.agents) {
		e := d.agents[id]
		if e.persistentID == pid && e.a.OwnerID == "" {
			return e
		}
	}
	return nil
}

// reclaimByIdentity gives an orphaned agent to the registering session.
func (tx *txn) reclaimByIdentity(e *agentEntry, r *concordv1.AgentRecord) RegisterResult {
	prev := e.a.SessionID
	a := tx.reclaim(e, r.GetOwnerId(), r.GetSessionId(), r.GetHomeNode(), "resumed persistent identity")
	return RegisterResult{Agent: a, Resumed: true, PreviousSessionID: prev}
}

// reclaim moves an agent to a new owner; an orphaned agent gets back the
// state it had before it was orphaned.
func (tx *txn) reclaim(e *agentEntry, owner, session, home, reason string) Agent {
	ne := *e
	a := copyAgent(&e.a)
	a.OwnerID, a.SessionID, a.HomeNode = owner, session, home
	a.Lifecycle.LastActiveAt = tx.ts
	prevState := a.State
	if prevState == StateOrphaned && owner != "" {
		a.State = e.stateBeforeOrphan
		if a.State == "" {
			a.State = StateActive
		}
		a.Lifecycle.OrphanedAt = 0
		ne.stateBeforeOrphan = ""
	}
	ne.a = a
	tx.d.putAgent(&ne)
	if a.State != prevState {
		tx.emitStateChange(a.ID, prevState, a.State, reason, a.Scopes)
	}
	return copyAgent(&a)
}

// orphan clears an agent's owner and marks it orphaned.
func (tx *txn) orphan(e *agentEntry, sessionID string) {
	ne := *e
	a := copyAgent(&e.a)
	prevOwner, prevState := a.OwnerID, a.State
	ne.stateBeforeOrphan = prevState
	a.OwnerID, a.HomeNode = "", ""
	a.State = StateOrphaned
	a.Lifecycle.OrphanedAt = tx.ts
	ne.a = a
	tx.d.putAgent(&ne)
	tx.emitData(EventAgentOrphaned, orphanedData(a.ID, prevOwner, prevState, sessionID, tx.ts), []string{a.ID}, a.Scopes)
}

// applyAgentUnregister handles COMMAND_TYPE_AGENT_UNREGISTER.
func (s *State) applyAgentUnregister(tx *txn, m *concordv1.AgentUnregisterRequest) (any, error) {
	e := tx.d.agents[m.GetAgentId()]
	a := copyAgent(&e.a)
	tx.removeAgent(e, m.GetReason())
	return a, nil
}

// removeAgent deletes an agent, leaves its scopes (deleting autoDelete
// scopes it empties) and emits agent_unregistered.
func (tx *txn) removeAgent(e *agentEntry, reason string) {
	id := e.a.ID
	tx.d.delAgent(id)
	unregID := tx.emitData(EventAgentUnregistered, unregisteredData(id, reason), []string{id}, e.a.Scopes)
	for _, sc := range e.a.Scopes {
		tx.leaveScope(sc, id, unregID)
	}
}

// applyAgentUpdate handles COMMAND_TYPE_AGENT_UPDATE.
func (s *State) applyAgentUpdate(tx *txn, m *concordv1.AgentUpdateRequest) (any, error) {
	d := tx.d
	e := d.agents[m.GetAgentId()]
	target, _ := updateTarget(e.a.State, m) // checked by checkAgentUpdate
	if m.GetSetOwner() {
		if m.GetOwnerId() == "" {
			if e.a.OwnerID != "" {
				tx.orphan(e, e.a.SessionID)
			}
		} else {
			tx.reclaim(e, m.GetOwnerId(), m.GetSessionId(), m.GetHomeNode(), "ownership changed")
		}
		e = d.agents[m.GetAgentId()]
	}
	ne := *e
	a := e.a // an update never changes Scopes: the stored slice is shared
	applyFields(&a, m)
	a.Lifecycle.LastActiveAt = tx.ts
	prev := a.State
	if target != "" && target != prev {
		setState(&a, target, m.GetReason(), tx.ts)
	}
	ne.a = a
	d.putAgent(&ne)
	if a.State != prev {
		tx.emitStateChange(a.ID, prev, a.State, m.GetReason(), a.Scopes)
	}
	if m.PermissionOverrides != nil && !bytes.Equal(m.PermissionOverrides, e.a.PermissionOverrides) {
		tx.emit(EventPermissionsAgentUpdated, map[string]any{"agentId": a.ID, "changes": a.PermissionOverrides,
			"permissionOverrides": a.PermissionOverrides, "updatedBy": tx.source}, []string{a.ID}, a.Scopes)
	}
	if m.Environment != nil && !bytes.Equal(m.Environment, e.a.Environment) {
		tx.emit(EventAgentEnvironmentChanged, map[string]any{"agentId": a.ID, "environment": a.Environment}, []string{a.ID}, a.Scopes)
	}
	return agentResult{&ne}, nil
}

// agentResult is an Agent result built only when read (raftstore's
// LazyResult): most replicas applying an update never read its result,
// and the copy costs an allocation the size of an Agent. The entry it
// points to is never changed once stored (copy-on-write), so Value may
// run after later commands.
type agentResult struct{ e *agentEntry }

// Value implements raftstore.LazyResult.
func (r agentResult) Value() any { return copyAgent(&r.e.a) }

// updateTarget validates the transition/state part of an update and
// returns the target state ("" = unchanged).
func updateTarget(current string, m *concordv1.AgentUpdateRequest) (string, error) {
	verb := m.GetTransition()
	if verb != "" && m.State != nil {
		return "", errf(CodeInvalidParams, "state", "transition and state are exclusive")
	}
	if verb != "" {
		t, err := transitionTarget(verb, current)
		if err != nil {
			return "", err
		}
		return t, nil
	}
	if m.State != nil {
		if err := checkStateChange(current, m.GetState()); err != nil {
			return "", err
		}
		return m.GetState(), nil
	}
	return "", nil
}

// applyFields copies the optional descriptive fields of an update.
func applyFields(a *Agent, m *concordv1.AgentUpdateRequest) {
	if m.Name != nil {
		a.Name = m.GetName()
	}
	if m.Description != nil {
		a.Description = m.GetDescription()
	}
	if m.Role != nil {
		a.Role = m.GetRole()
	}
	if m.Visibility != nil {
		a.Visibility = m.GetVisibility()
	}
	if m.Metadata != nil {
		a.Metadata = raw(m.Metadata)
	}
	if m.Environment != nil {
		a.Environment = raw(m.Environment)
	}
	if m.PermissionOverrides != nil {
		a.PermissionOverrides = raw(m.PermissionOverrides)
	}
	if m.Capabilities != nil {
		a.Capabilities = raw(m.Capabilities)
	}
	if m.CapabilityDescriptor != nil {
		a.CapabilityDescriptor = raw(m.CapabilityDescriptor)
	}
}
