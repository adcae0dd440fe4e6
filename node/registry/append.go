package registry

import (
	"slices"

	"github.com/oklog/ulid/v2"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// AppendEvents puts events produced by a sibling state module (for example
// the consensus runs module) into the replicated event log window, so every
// node's subscribers see them with the same ids and positions as registry
// events.
//
// It must be called only from that module's raftstore Handler.Apply, on
// raft's FSM goroutine, with the Raft index being applied: the window is
// replicated state, and only a call made identically on every replica keeps
// replicas equal. The caller chooses ID, Type, Timestamp, Source, Data,
// AgentIDs and ScopeIDs deterministically (no clock, no randomness).
// Position is assigned here. An event whose ID is empty, not a ULID, or
// already used in the window (or earlier in evs) gets an id derived the
// way registry commands derive theirs: from the previous event's ULID plus
// one, or from Timestamp and index when there is none.
//
// It returns copies of the appended events as stored (final ID and
// Position) and wakes Notify waiters once. Slices in evs are copied; Data
// is kept as is and must not be modified afterwards.
func (s *State) AppendEvents(index uint64, evs []Event) []Event {
	if len(evs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := s.begin(index, &concordv1.CommandMeta{TimestampMs: evs[0].Timestamp})
	out := make([]Event, len(evs))
	for i, ev := range evs {
		ev.Position = 0
		ev.ID = tx.siblingEventID(ev.ID, ev.Timestamp)
		ev.AgentIDs = sortedUnique(ev.AgentIDs)
		ev.ScopeIDs = sortedUnique(ev.ScopeIDs)
		if len(ev.CausedBy) > 0 {
			ev.CausedBy = slices.Clone(ev.CausedBy)
		}
		out[i] = ev
	}
	s.d.events.appendAll(out)
	s.wake()
	return slices.Clone(out)
}

// siblingEventID keeps a caller-supplied id when it is a ULID not used in
// the window or this call, and otherwise derives one (see AppendEvents).
func (t *txn) siblingEventID(id string, ts int64) string {
	t.lastFromIDs()
	if u, err := ulid.ParseStrict(id); err == nil {
		t.lastID, t.haveID = u, true
		if !t.used(id) {
			return t.take(id)
		}
	}
	if !t.haveID {
		// eventID derives the first id from the command time; use this
		// event's own time for it.
		t.ts = ts
	}
	return t.eventID()
}
