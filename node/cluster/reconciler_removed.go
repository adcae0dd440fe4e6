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
// it leave, die, be forgotten, or come back at another Raft address (a
// rejoin). Every node runs this on every pass, followers included
// (Reconciler.observe), and the configuration it reads is Raft's, so a new
// leader already holds the same marks: a leader change does not bring the
// server back, which a tombstone kept only in the old leader's memory
// would. Nothing is written to the log.
//
// Limits, accepted for this simplicity: a node whose gossip view missed
// the server being alive at the removal (it saw it dead) keeps no mark and
// would re-add it once leader; a node that saw the server alive while the
// leader removed it as dead keeps a mark until it too sees it dead.
// memberlist does not expose incarnations, so a restart quicker than
// failure detection, at the same address, is not seen as a rejoin: stop
// the node until gossip marks it dead, or restart it on a new address.
//
// Only the reconciler's goroutine uses it.
type removedAlive struct {
	log *slog.Logger
	// prev holds the servers configured and alive at the last look, with
	// the Raft address gossip advertised for them.
	prev map[string]string
	// marks holds the force-removed servers and their Raft address.
	marks map[string]string
}

func newRemovedAlive(log *slog.Logger) *removedAlive {
	return &removedAlive{log: log, prev: map[string]string{}, marks: map[string]string{}}
}

// update takes this look's configuration and member views and returns the
// ids the reconciler must not add back.
func (r *removedAlive) update(servers []raftstore.Server, members map[string]memberView) map[string]bool {
	configured := make(map[string]bool, len(servers))
	for _, s := range servers {
		configured[s.ID] = true
	}
	aliveAt := func(id, addr string) bool {
		m, ok := members[id]
		return ok && m.status == membership.StatusAlive && m.raftAddr == addr
	}
	for id, addr := range r.marks {
		if configured[id] || !aliveAt(id, addr) {
			delete(r.marks, id)
			r.log.Info("force-removed server may be added again", "peer", id, "reason", "left, died, rejoined or re-added")
		}
	}
	for id, addr := range r.prev {
		if _, marked := r.marks[id]; !marked && !configured[id] && aliveAt(id, addr) {
			r.marks[id] = addr
			r.log.Info("server removed from raft while alive; not adding it back until it leaves, dies or rejoins", "peer", id)
		}
	}
	r.prev = make(map[string]string, len(servers))
	for _, s := range servers {
		if m, ok := members[s.ID]; ok && m.status == membership.StatusAlive {
			r.prev[s.ID] = m.raftAddr
		}
	}
	out := make(map[string]bool, len(r.marks))
	for id := range r.marks {
		out[id] = true
	}
	return out
}
