package cluster

import (
	"log/slog"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
)

// removedAlive keeps the reconciler from undoing an operator's forced
// `raft remove-peer` of a server that gossip still sees alive. Without it
// the leader's next pass would find an alive server missing from the Raft
// configuration and add it straight back.
//
// Design: the "tombstone" is inferred, not stored. The reconciler itself
// never removes an alive server (only ones that left or stayed dead for
// the cleanup delay), and RemovePeer refuses an alive one unless forced.
// So when a server that was configured and alive at this node's previous
// look is missing from the configuration while still alive at the same
// Raft address, it was force-removed, and it stays out until gossip shows
// it leave, die, be forgotten, or come back at another Raft address or as
// a new process (a rejoin: its advertised boot id changed). Every node runs this on every pass, followers included
// (Reconciler.observe), and the configuration it reads is Raft's, so a new
// leader already holds the same marks: a leader change does not bring the
// server back, which a tombstone kept only in the old leader's memory
// would. Nothing is written to the log.
//
// Limits, accepted for this simplicity: a node whose gossip view missed
// the server being alive at the removal (it saw it dead) keeps no mark and
// would re-add it once leader; a node that saw the server alive while the
// leader removed it as dead keeps a mark until it too sees it dead.
// A restart quicker than failure detection, at the same address, is seen
// through the boot id every process advertises in its gossip meta
// (memberlist does not expose incarnations): restarting a force-removed
// server is how an operator lets it back in.
//
// Only the reconciler's goroutine uses it.
type removedAlive struct {
	log *slog.Logger
	// prev holds the servers configured and alive at the last look, with
	// the Raft address and boot id gossip advertised for them.
	prev map[string]incarnation
	// marks holds the force-removed servers as they were removed.
	marks map[string]incarnation
}

// incarnation is one run of a server process: where it listens for Raft
// and its boot id.
type incarnation struct{ raftAddr, bootID string }

func newRemovedAlive(log *slog.Logger) *removedAlive {
	return &removedAlive{log: log, prev: map[string]incarnation{}, marks: map[string]incarnation{}}
}

// update takes this look's configuration and member views and returns the
// ids the reconciler must not add back.
func (r *removedAlive) update(servers []raftstore.Server, members map[string]memberView) map[string]bool {
	configured := make(map[string]bool, len(servers))
	for _, s := range servers {
		configured[s.ID] = true
	}
	aliveAs := func(id string, inc incarnation) bool {
		m, ok := members[id]
		return ok && m.status == membership.StatusAlive && (incarnation{m.raftAddr, m.bootID}) == inc
	}
	for id, inc := range r.marks {
		if configured[id] || !aliveAs(id, inc) {
			delete(r.marks, id)
			r.log.Info("force-removed server may be added again", "peer", id, "reason", "left, died, restarted, rejoined or re-added")
		}
	}
	for id, inc := range r.prev {
		if _, marked := r.marks[id]; !marked && !configured[id] && aliveAs(id, inc) {
			r.marks[id] = inc
			r.log.Info("server removed from raft while alive; not adding it back until it leaves, dies, restarts or rejoins", "peer", id)
		}
	}
	r.prev = make(map[string]incarnation, len(servers))
	for _, s := range servers {
		if m, ok := members[s.ID]; ok && m.status == membership.StatusAlive {
			r.prev[s.ID] = incarnation{m.raftAddr, m.bootID}
		}
	}
	out := make(map[string]bool, len(r.marks))
	for id := range r.marks {
		out[id] = true
	}
	return out
}
