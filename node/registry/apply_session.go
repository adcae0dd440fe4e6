package registry

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applySessionOpen handles COMMAND_TYPE_SESSION_OPEN: a new session, or
// with resume the re-attachment of an existing one to the proposing node.
func (s *State) applySessionOpen(tx *txn, m *concordv1.SessionOpenRequest) (any, error) {
	r := m.GetSession()
	if m.GetResume() {
		return tx.resumeSession(m), nil
	}
	sess := Session{
		ID:               r.GetId(),
		ParticipantID:    r.GetParticipantId(),
		ParticipantType:  r.GetParticipantType(),
		Name:             r.GetName(),
		HomeNode:         tx.home(r.GetHomeNode()),
		Connected:        true,
		CreatedAt:        tx.ts,
		LastActiveAt:     tx.ts,
		DisconnectPolicy: policyFromRecord(r.GetDisconnectPolicy()),
		ResumeTokenHash:  slices.Clone(r.GetResumeTokenHash()),
	}
	e := &sessionEntry{s: sess, epoch: 1}
	tx.d.putSession(e)
	tx.emitData(EventParticipantConnected, connectedData(&sess, false), nil, nil)
	res := SessionResult{Epoch: e.epoch}
	tx.reclaimRequested(&sess, m, &res)
	return tx.finishOpen(sess.ID, res), nil
}

func (tx *txn) home(n string) string {
	if n != "" {
		return n
	}
	return tx.nodeID
}

// resumeSession re-attaches a session: new home node and epoch, its
// agents re-homed, and the agents it lost to orphaning reclaimed.
func (tx *txn) resumeSession(m *concordv1.SessionOpenRequest) SessionResult {
	r := m.GetSession()
	e := tx.d.sessions[r.GetId()]
	ne := *e
	ne.s = copySession(&e.s)
	sess := &ne.s
	sess.HomeNode = tx.home(r.GetHomeNode())
	sess.Connected = true
	sess.DetachedAt, sess.ClosedAt = 0, 0
	sess.LastActiveAt = tx.ts
	if p := r.GetDisconnectPolicy(); p.GetAgentBehavior() != "" {
		sess.DisconnectPolicy = policyFromRecord(p)
	}
	ne.epoch++
	ne.ttlMs, ne.graceDone = 0, false
	tx.d.putSession(&ne)
	tx.emitData(EventParticipantConnected, connectedData(sess, true), nil, nil)

	res := SessionResult{Epoch: ne.epoch, Resumed: true}
	for _, id := range tx.d.sessionAgents(sess.ID) {
		ae := tx.d.agents[id]
		wasOrphan := ae.a.OwnerID == ""
		a := tx.reclaim(ae, sess.ParticipantID, sess.ID, sess.HomeNode, "session resumed")
		if wasOrphan {
			res.Reclaimed = append(res.Reclaimed, a)
		}
	}
	tx.reclaimRequested(sess, m, &res)
	return tx.finishOpen(sess.ID, res)
}

// reclaimRequested handles reclaim_agents: an agent is reclaimable when it
// is orphaned or already owned by the same participant, and, when the
// proposer quoted reclaim_from_sessions, still in the session it was in
// when the proposer read it.
func (tx *txn) reclaimRequested(sess *Session, m *concordv1.SessionOpenRequest, res *SessionResult) {
	ids := m.GetReclaimAgents()
	var seen map[string]string
	if from := m.GetReclaimFromSessions(); len(from) > 0 {
		seen = make(map[string]string, len(ids))
		for i, id := range ids {
			seen[id] = from[i] // checkSessionOpen: as many as ids
		}
	}
	for _, id := range sortedUnique(ids) {
		ae := tx.d.agents[id]
		if ae == nil || (ae.a.OwnerID != "" && ae.a.OwnerID != sess.ParticipantID) ||
			(seen != nil && ae.a.SessionID != seen[id]) {
			res.NotReclaimed = append(res.NotReclaimed, id)
			continue
		}
		if ae.a.SessionID == sess.ID && ae.a.OwnerID != "" && ae.a.HomeNode == sess.HomeNode {
			continue // already ours
		}
		res.Reclaimed = append(res.Reclaimed, tx.reclaim(ae, sess.ParticipantID, sess.ID, sess.HomeNode, "reclaimed"))
	}
	sort.Slice(res.Reclaimed, func(i, j int) bool { return res.Reclaimed[i].ID < res.Reclaimed[j].ID })
}

func (tx *txn) finishOpen(id string, res SessionResult) SessionResult {
	res.Session = copySession(&tx.d.sessions[id].s)
	for _, aid := range tx.d.sessionAgents(id) {
		if a := &tx.d.agents[aid].a; a.OwnerID != "" {
			res.OwnedAgents = append(res.OwnedAgents, aid)
		}
	}
	return res
}

// applySessionClose handles COMMAND_TYPE_SESSION_CLOSE (map/disconnect).
func (s *State) applySessionClose(tx *txn, m *concordv1.SessionCloseRequest) (any, error) {
	return tx.detach(m.GetSessionId(), m.GetEpoch(), "", m.GetReason(), m.GetTtlMs(), true), nil
}

// applySessionDetach handles COMMAND_TYPE_SESSION_DETACH (connection lost).
func (s *State) applySessionDetach(tx *txn, m *concordv1.SessionDetachRequest) (any, error) {
	return tx.detach(m.GetSessionId(), m.GetEpoch(), m.GetHomeNode(), m.GetReason(), m.GetTtlMs(), false), nil
}

// detach marks a session detached and applies its disconnect policy to the
// agents it owns: unregister (also the default for an empty policy),
// orphan, or grace-period (orphan now, unregister at the grace expiry).
// A detach for another epoch, for another home node (when homeNode is
// set), or of an already detached session is stale and changes nothing.
func (tx *txn) detach(id string, epoch uint64, homeNode, reason string, ttl int64, closing bool) DetachResult {
	e, ok := tx.d.sessions[id]
	if !ok || e.epoch != epoch || !e.s.Connected || (homeNode != "" && e.s.HomeNode != homeNode) {
		return DetachResult{}
	}
	ne := *e
	ne.s = copySession(&e.s)
	sess := &ne.s
	sess.Connected, sess.HomeNode = false, ""
	sess.DetachedAt, sess.LastActiveAt = tx.ts, tx.ts
	if closing {
		sess.ClosedAt = tx.ts
	}
	ne.epoch++
	ne.ttlMs, ne.graceDone = max(ttl, 0), false
	tx.d.putSession(&ne)
	if homeNode != "" && homeNode != tx.nodeID {
		// Another node (the leader, for a node it saw fail) took the
		// session from its home node's connection, which may be open.
		tx.d.moves++
	}
	if reason == "" {
		reason = "disconnected"
	}
	discID := tx.emitData(EventParticipantDisconnected, disconnectedData(sess.ParticipantID, id, reason), nil, nil)

	res := DetachResult{Applied: true}
	for _, aid := range tx.d.sessionAgents(id) {
		ae := tx.d.agents[aid]
		if ae.a.OwnerID == "" {
			continue
		}
		switch sess.DisconnectPolicy.AgentBehavior {
		case BehaviorOrphan, BehaviorGracePeriod:
			tx.orphan(ae, id)
			res.Orphaned = append(res.Orphaned, aid)
		default:
			tx.removeAgentCaused(ae, "session disconnected", discID)
			res.Unregistered = append(res.Unregistered, aid)
		}
	}
	res.Session = copySession(sess)
	return res
}

// removeAgentCaused is removeAgent with a causedBy link.
func (tx *txn) removeAgentCaused(e *agentEntry, reason, cause string) {
	id := e.a.ID
	tx.d.delAgent(id)
	unregID := tx.emitData(EventAgentUnregistered, unregisteredData(id, reason), []string{id}, e.a.Scopes, cause)
	for _, sc := range e.a.Scopes {
		tx.leaveScope(sc, id, unregID)
	}
}

// applySessionExpire handles COMMAND_TYPE_SESSION_EXPIRE. It is a no-op
// (Applied=false) unless the session is still detached at the quoted epoch
// and the deadline (from the detach command's time) is not after this
// command's time, so duplicates from successive leaders are harmless.
func (s *State) applySessionExpire(tx *txn, m *concordv1.SessionExpireRequest) (any, error) {
	kind := m.GetKind()
	e, ok := tx.d.sessions[m.GetSessionId()]
	if !ok || e.s.Connected || e.epoch != m.GetEpoch() {
		return DetachResult{}, nil
	}
	var deadline int64
	switch kind {
	case ExpireGrace:
		if !gracePending(e) {
			return DetachResult{}, nil
		}
		deadline = e.s.DetachedAt + e.s.DisconnectPolicy.GracePeriodMs
	case ExpireTTL:
		if e.ttlMs <= 0 {
			return DetachResult{}, nil
		}
		deadline = e.s.DetachedAt + e.ttlMs
	}
	if tx.ts < deadline {
		return DetachResult{}, nil
	}
	res := DetachResult{Applied: true}
	if gracePending(e) {
		res.Unregistered = tx.expireGrace(e)
	}
	if kind == ExpireTTL {
		tx.removeSession(e.s.ID)
		res.Removed = true
		return res, nil
	}
	res.Session = copySession(&tx.d.sessions[e.s.ID].s)
	return res, nil
}

func gracePending(e *sessionEntry) bool {
	return e.s.DisconnectPolicy.AgentBehavior == BehaviorGracePeriod && !e.graceDone
}

// expireGrace unregisters the agents the session orphaned and nobody has
// reclaimed since.
func (tx *txn) expireGrace(e *sessionEntry) []string {
	var gone []string
	for _, aid := range tx.d.sessionAgents(e.s.ID) {
		ae := tx.d.agents[aid]
		if ae.a.OwnerID == "" {
			tx.removeAgent(ae, "grace period expired")
			gone = append(gone, aid)
		}
	}
	ne := *e
	ne.graceDone = true
	tx.d.putSession(&ne)
	return gone
}

// removeSession forgets a session and its subscriptions; agents it
// orphaned stay orphaned with no session.
func (tx *txn) removeSession(id string) {
	tx.d.delSession(id)
	for _, aid := range tx.d.sessionAgents(id) {
		ae := tx.d.agents[aid]
		ne := *ae
		ne.a = copyAgent(&ae.a)
		ne.a.SessionID = ""
		tx.d.putAgent(&ne)
	}
}

// Expiries lists the pending deadlines of detached sessions, earliest
// first (then by session id, grace before TTL). A grace period counts only
// for a session that still has agents: its expiry unregisters the ones
// nobody reclaimed, and with none it would change nothing but mark itself
// done (an idle client's session, the bulk of them, owns no agent).
func (s *State) Expiries() []Expiry { return s.expiries(math.MaxInt64) }

// DueExpiries lists the deadlines at or before now (Unix ms), in Expiries'
// order. The leader's expiry loop proposes SESSION_EXPIRE for them; it
// walks the detached sessions only and sorts only what is due, and not
// even that while now is before the earliest deadline its last walk saw
// and no session or agent changed since (the loop runs every second and
// after every detach, and thousands of sessions may sit in their TTL).
func (s *State) DueExpiries(now int64) []Expiry {
	s.mu.RLock()
	d := s.d
	skip := d.expGen.Load() == d.gen && now < d.expNext.Load()
	s.mu.RUnlock()
	if skip {
		return nil
	}
	return s.expiries(now)
}

func (s *State) expiries(until int64) []Expiry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Expiry
	next := int64(math.MaxInt64)
	for id := range s.d.detached {
		e := s.d.sessions[id]
		if d := e.s.DetachedAt + e.s.DisconnectPolicy.GracePeriodMs; gracePending(e) && len(s.d.bySession[id]) > 0 {
			next = min(next, d)
			if d <= until {
				out = append(out, Expiry{id, e.epoch, ExpireGrace, d})
			}
		}
		if d := e.s.DetachedAt + e.ttlMs; e.ttlMs > 0 {
			next = min(next, d)
			if d <= until {
				out = append(out, Expiry{id, e.epoch, ExpireTTL, d})
			}
		}
	}
	// Readers race to store this: all of them computed it from the same
	// generation (the read lock excludes writers), so any of them is right.
	s.d.expNext.Store(next)
	s.d.expGen.Store(s.d.gen)
	slices.SortFunc(out, func(a, b Expiry) int {
		return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), strings.Compare(a.SessionID, b.SessionID), strings.Compare(a.Kind, b.Kind))
	})
	return out
}
