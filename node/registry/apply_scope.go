package registry

import (
	"slices"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applyScopeCreate handles COMMAND_TYPE_SCOPE_CREATE.
func (s *State) applyScopeCreate(tx *txn, m *concordv1.ScopeCreateRequest) (any, error) {
	r := m.GetScope()
	id := r.GetId()
	sc := scopeFromRecord(r)
	sc.Members = nil
	tx.d.scopes[id] = &sc
	tx.emit(EventScopeCreated, map[string]any{"scope": sc}, nil, []string{id})
	return copyScope(&sc), nil
}

// applyScopeDelete handles COMMAND_TYPE_SCOPE_DELETE. A scope with child
// scopes is refused (CodeInvalidRequest) rather than leaving children with
// a dangling parent. Members simply stop being members.
func (s *State) applyScopeDelete(tx *txn, m *concordv1.ScopeDeleteRequest) (any, error) {
	sc := tx.d.scopes[m.GetScopeId()]
	out := copyScope(sc)
	tx.deleteScope(sc)
	return out, nil
}

func (d *data) hasChildScopes(id string) bool {
	for _, sc := range d.scopes {
		if sc.Parent == id {
			return true
		}
	}
	return false
}

// deleteScope removes a scope and its id from its members' scope lists.
func (tx *txn) deleteScope(sc *Scope, causedBy ...string) {
	for _, aid := range sc.Members {
		if e := tx.d.agents[aid]; e != nil {
			ne := *e
			ne.a = copyAgent(&e.a)
			ne.a.Scopes = removeValue(e.a.Scopes, sc.ID)
			tx.d.putAgent(&ne)
		}
	}
	delete(tx.d.scopes, sc.ID)
	tx.emit(EventScopeDeleted, map[string]any{"scopeId": sc.ID}, sc.Members, []string{sc.ID}, causedBy...)
}

// addMember adds agentID to a scope's member list (scope side only).
func (d *data) addMember(scopeID, agentID string) {
	sc := copyScope(d.scopes[scopeID])
	sc.Members = insertSorted(sc.Members, agentID)
	d.scopes[scopeID] = &sc
}

// leaveScope removes agentID from a scope (scope side only), emits
// scope_member_left and deletes an autoDelete scope left empty (unless it
// has child scopes). It reports whether the scope was deleted.
func (tx *txn) leaveScope(scopeID, agentID string, causedBy ...string) bool {
	cur := tx.d.scopes[scopeID]
	if cur == nil || !slices.Contains(cur.Members, agentID) {
		return false
	}
	sc := copyScope(cur)
	sc.Members = removeValue(sc.Members, agentID)
	tx.d.scopes[scopeID] = &sc
	leftID := tx.emitData(EventScopeMemberLeft, memberData(scopeID, agentID), []string{agentID}, []string{scopeID}, causedBy...)
	if sc.AutoDelete && len(sc.Members) == 0 && !tx.d.hasChildScopes(scopeID) {
		tx.deleteScope(&sc, leftID)
		return true
	}
	return false
}

// lookupMembership validates a join/leave pair.
func (d *data) lookupMembership(scopeID, agentID string) (*Scope, *agentEntry, error) {
	sc, ok := d.scopes[scopeID]
	if !ok {
		return nil, nil, scopeNotFound(scopeID)
	}
	e, ok := d.agents[agentID]
	if !ok {
		return nil, nil, agentNotFound(agentID)
	}
	return sc, e, nil
}

// applyScopeJoin handles COMMAND_TYPE_SCOPE_JOIN (idempotent).
func (s *State) applyScopeJoin(tx *txn, m *concordv1.ScopeJoinRequest) (any, error) {
	sc, e, _ := tx.d.lookupMembership(m.GetScopeId(), m.GetAgentId()) // checked
	if slices.Contains(sc.Members, e.a.ID) {
		return MembershipResult{Scope: copyScope(sc), Agent: copyAgent(&e.a)}, nil
	}
	tx.d.addMember(sc.ID, e.a.ID)
	ne := *e
	ne.a = copyAgent(&e.a)
	ne.a.Scopes = insertSorted(slices.Sorted(slices.Values(e.a.Scopes)), sc.ID)
	tx.d.putAgent(&ne)
	tx.emitData(EventScopeMemberJoined, memberData(sc.ID, e.a.ID), []string{e.a.ID}, []string{sc.ID})
	return MembershipResult{
		Scope:   copyScope(tx.d.scopes[sc.ID]),
		Agent:   copyAgent(&ne.a),
		Changed: true,
	}, nil
}

// applyScopeLeave handles COMMAND_TYPE_SCOPE_LEAVE (idempotent).
func (s *State) applyScopeLeave(tx *txn, m *concordv1.ScopeLeaveRequest) (any, error) {
	sc, e, _ := tx.d.lookupMembership(m.GetScopeId(), m.GetAgentId()) // checked
	if !slices.Contains(sc.Members, e.a.ID) {
		return MembershipResult{Scope: copyScope(sc), Agent: copyAgent(&e.a)}, nil
	}
	ne := *e
	ne.a = copyAgent(&e.a)
	ne.a.Scopes = removeValue(e.a.Scopes, sc.ID)
	tx.d.putAgent(&ne)
	res := MembershipResult{Agent: copyAgent(&ne.a), Changed: true}
	before := copyScope(sc)
	if tx.leaveScope(sc.ID, e.a.ID) {
		before.Members = removeValue(before.Members, e.a.ID)
		res.Scope, res.ScopeDeleted = before, true
	} else {
		res.Scope = copyScope(tx.d.scopes[sc.ID])
	}
	return res, nil
}
