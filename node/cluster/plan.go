package cluster

import (
	"cmp"
	"slices"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// This file is the reconciler's decision, as a pure function of what the
// leader sees: no clock, no I/O, so every rule is a table test.

// actionKind is what one reconcile step does.
type actionKind int

const (
	actAddVoter    actionKind = iota + 1 // AddVoter(id, addr); also promotes a non-voter
	actRemove                            // RemoveServer(id)
	actDetach                            // SESSION_DETACH(session) homed on node
	actAddNonvoter                       // AddNonvoter(id, addr)
	actDemote                            // DemoteVoter(id)
)

// action is one step of a reconcile pass.
type action struct {
	kind    actionKind
	id      string // server id (add/remove) or the session's home node (detach)
	addr    string // Raft address (add)
	session string // session id (detach)
	reason  string
}

// memberView is a node as the reconciler sees it: its gossip status (0
// when gossip does not know the node) and since when it has had that
// status, as first observed by this node.
type memberView struct {
	id       string
	raftAddr string
	bootID   string // changes when the member's process restarts
	server   bool
	status   membership.Status
	since    time.Time
	// raftVoters is the member's advertised --raft-voters (0: an older
	// version that does not say); draining is set while it is drained.
	raftVoters int
	draining   bool
	version    string
	// fsmLevel is the replicated-state behaviour the member's build
	// enforces (registry.FSMLevel; 0 from versions before levels).
	fsmLevel int
}

const statusUnknown membership.Status = 0

// planInput is everything plan decides from.
type planInput struct {
	self     string
	servers  []raftstore.Server    // the Raft configuration
	members  map[string]memberView // gossip members and tracked unknown nodes
	sessions []registry.Session    // the registry's sessions (may be nil)
	removed  map[string]bool       // force-removed alive servers not to add back
	now      time.Time
	delay    time.Duration // DeadServerCleanupDelay
	minQuo   int           // MinQuorum
	// target is RaftVoters: 0 makes every server a voter (the behaviour
	// before non-voters); otherwise new servers join as non-voters and
	// the autopilot rules (autopilot.go) keep target healthy voters.
	target int
	// health is the leader's latest look at each configured server
	// (autopilot.go); stable is ServerStabilizationTime.
	health map[string]ServerHealth
	stable time.Duration
	// grace is SessionDetachGrace: how long a home node must have been
	// dead before its sessions are detached.
	grace time.Duration
	// recorded is the system FSM level recorded in replicated state (0:
	// none, or no Levels dependency).
	recorded int
}

// plan returns the steps that bring the Raft configuration and the
// registry in line with membership, in the order they must run: adds
// first (a new voter raises the count before anything is removed), then
// removals, then session detaches. Rules:
//   - an alive server member missing from the configuration, a non-voter,
//     or at another Raft address → AddVoter, unless an operator removed it
//     by force while it was alive (in.removed);
//   - a configured server that left gracefully → RemoveServer at once;
//   - a configured server dead (or unknown to gossip) for at least delay →
//     RemoveServer, unless that would leave fewer than minQuo voters;
//   - a connected session homed on a node that left, or on a dead server
//     removed from (or no longer in) the configuration → SESSION_DETACH
//     at once; on a node dead for at least grace (a false failure under
//     load is refuted sooner) or unknown for at least delay → SESSION_DETACH.
//
// With a target number of voters (in.target > 0) a server missing from the
// configuration joins as a non-voter instead (a moved one keeps its
// suffrage), a member advertising another target is not added at all, and
// promotions and demotions follow the autopilot rules (autopilot.go),
// planned after the removals.
//
// A server missing from the configuration whose FSM level is below every
// configured server's (fsmFloor) is not added: entries proposed once the
// whole system enforced a level may carry fields an older build would
// apply differently (README "Upgrades"); the reconciler logs it.
//
// This node (the leader) is never removed or detached.
func plan(in planInput) []action {
	var out []action
	byID := make(map[string]raftstore.Server, len(in.servers))
	voters := 0
	for _, s := range in.servers {
		byID[s.ID] = s
		if s.Voter {
			voters++
		}
	}
	for _, m := range sortedMembers(in.members) {
		if m.id == in.self || m.status != membership.StatusAlive || !m.server || m.raftAddr == "" || in.removed[m.id] {
			continue
		}
		s, ok := byID[m.id]
		if !ok && m.fsmLevel < fsmFloor(in) {
			continue
		}
		if in.target > 0 {
			if a, add := addUnderTarget(in.target, m, s, ok); add {
				out = append(out, a)
			}
			continue
		}
		if ok && s.Voter && s.Address == m.raftAddr {
			continue
		}
		if !ok || !s.Voter {
			voters++
		}
		out = append(out, action{kind: actAddVoter, id: m.id, addr: m.raftAddr, reason: "alive server not a voter"})
	}
	servers := slices.SortedFunc(slices.Values(in.servers), func(a, b raftstore.Server) int { return cmp.Compare(a.ID, b.ID) })
	removed := map[string]bool{}
	for _, s := range servers {
		if s.ID == in.self {
			continue
		}
		m := in.members[s.ID]
		switch {
		case m.status == membership.StatusLeft:
			out = append(out, action{kind: actRemove, id: s.ID, reason: "left"})
		case gone(m, in.now, in.delay):
			if s.Voter && voters-1 < in.minQuo {
				continue // keep it: removing would go below MinQuorum
			}
			out = append(out, action{kind: actRemove, id: s.ID, reason: "dead for the cleanup delay"})
		default:
			continue
		}
		removed[s.ID] = true
		if s.Voter {
			voters--
		}
	}
	if in.target > 0 {
		out = append(out, autopilot(in, removed)...)
	}
	for _, sess := range in.sessions {
		if !sess.Connected || sess.HomeNode == "" || sess.HomeNode == in.self {
			continue
		}
		m, known := in.members[sess.HomeNode]
		switch {
		case known && m.status == membership.StatusLeft:
			out = append(out, action{kind: actDetach, id: sess.HomeNode, session: sess.ID, reason: "node " + sess.HomeNode + " left"})
		case known && m.status == membership.StatusDead && removed[m.id]:
			out = append(out, action{kind: actDetach, id: sess.HomeNode, session: sess.ID, reason: "node " + sess.HomeNode + " failed and removed"})
		case known && m.status == membership.StatusDead && (detachNow(m, byID) || m.since.Add(in.grace).Compare(in.now) <= 0):
			out = append(out, action{kind: actDetach, id: sess.HomeNode, session: sess.ID, reason: "node " + sess.HomeNode + " failed"})
		case known && gone(m, in.now, in.delay):
			out = append(out, action{kind: actDetach, id: sess.HomeNode, session: sess.ID, reason: "node " + sess.HomeNode + " unknown"})
		}
	}
	return out
}

// detachNow reports a dead member whose sessions need no grace: a server
// the Raft configuration no longer holds (the cleanup delay or an operator
// removed it), so the system has given up on it already.
func detachNow(m memberView, config map[string]raftstore.Server) bool {
	_, configured := config[m.id]
	return m.server && !configured
}

// nextDetach returns when the earliest connected session whose home node
// is dead but still within the grace becomes due for detaching (zero: none
// pending), so the leader's loop can wake then rather than at its next
// interval.
func nextDetach(in planInput) time.Time {
	var next time.Time
	byID := make(map[string]raftstore.Server, len(in.servers))
	for _, s := range in.servers {
		byID[s.ID] = s
	}
	for _, sess := range in.sessions {
		if !sess.Connected || sess.HomeNode == "" || sess.HomeNode == in.self {
			continue
		}
		m, known := in.members[sess.HomeNode]
		if !known || m.status != membership.StatusDead || detachNow(m, byID) {
			continue
		}
		if due := m.since.Add(in.grace); due.After(in.now) && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	return next
}

// gone reports a node dead or unknown to gossip for at least delay.
// (Unknown counts because membership forgets departed members after its
// retention, and a node that never gossiped cannot serve anyone.)
func gone(m memberView, now time.Time, delay time.Duration) bool {
	if m.status != membership.StatusDead && m.status != statusUnknown {
		return false
	}
	return !m.since.IsZero() && now.Sub(m.since) >= delay
}

func sortedMembers(ms map[string]memberView) []memberView {
	out := make([]memberView, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b memberView) int { return cmp.Compare(a.id, b.id) })
	return out
}

// tracker remembers since when each node has had its current status.
// membership reports the status but not when it changed, and the cleanup
// delay and the session detach grace count from then; a node first seen
// dead counts from that moment, and so does one whose boot id changed (a
// restart is a new life even if no pass saw it alive in between).
type tracker struct {
	seen map[string]memberView
}

func newTracker() *tracker { return &tracker{seen: make(map[string]memberView)} }

// update records the members and the extra node ids of interest (Raft
// servers and session home nodes, which gossip may not know), and returns
// the views of all of them. Nodes no longer of interest are forgotten.
func (t *tracker) update(members []membership.Member, extra []string, now time.Time) map[string]memberView {
	next := make(map[string]memberView, len(members)+len(extra))
	for _, m := range members {
		v := memberView{id: m.ID, raftAddr: m.RaftAddr, bootID: m.BootID, server: m.Role == membership.RoleServer, status: m.Status, since: now,
			raftVoters: m.RaftVoters, draining: m.Draining, version: m.Version, fsmLevel: m.FSMLevel}
		if old, ok := t.seen[m.ID]; ok && old.status == m.Status && (old.bootID == "" || m.BootID == "" || old.bootID == m.BootID) {
			v.since = old.since
		}
		next[m.ID] = v
	}
	for _, id := range extra {
		if _, ok := next[id]; ok || id == "" {
			continue
		}
		v := memberView{id: id, status: statusUnknown, since: now}
		if old, ok := t.seen[id]; ok && old.status == statusUnknown {
			v.since = old.since
		}
		next[id] = v
	}
	t.seen = next
	return next
}

// fsmFloor is the lowest FSM level a server joining the system must
// enforce: the level recorded in replicated state, or the lowest the
// configured servers advertise if higher.
func fsmFloor(in planInput) int {
	return max(advertisedFloor(in), in.recorded)
}

// advertisedFloor is the lowest FSM level the configured servers
// advertise, 0 when gossip does not know one of them: a system all of
// whose servers enforce level L may have proposed level-L fields
// (node/fsmlevel.go).
func advertisedFloor(in planInput) int {
	floor := -1
	for _, s := range in.servers {
		m, ok := in.members[s.ID]
		if !ok || m.status == statusUnknown {
			return 0
		}
		if floor < 0 || m.fsmLevel < floor {
			floor = m.fsmLevel
		}
	}
	return max(floor, 0)
}
