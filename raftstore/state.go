package raftstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// State is a server's raft role.
type State uint8

// The raft roles.
const (
	StateFollower State = iota
	StateCandidate
	StateLeader
	StateShutdown
)

// String implements fmt.Stringer.
func (st State) String() string {
	switch st {
	case StateFollower:
		return "follower"
	case StateCandidate:
		return "candidate"
	case StateLeader:
		return "leader"
	default:
		return "shutdown"
	}
}

// State returns this server's current role. It may change at any moment.
func (s *Store) State() State {
	switch s.raft.State() {
	case raft.Follower:
		return StateFollower
	case raft.Candidate:
		return StateCandidate
	case raft.Leader:
		return StateLeader
	default:
		return StateShutdown
	}
}

// IsLeader reports whether this server believes it is the leader. A
// partitioned ex-leader believes so for up to LeaderLeaseTimeout; use
// LinearizableRead when that matters.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// Leader returns the current leader's ID and address as this server knows
// them, or two empty strings when it knows of none.
func (s *Store) Leader() (id, addr string) {
	a, i := s.raft.LeaderWithID()
	return string(i), string(a)
}

// WaitForLeader waits until this server knows a leader (possibly itself)
// and returns it.
func (s *Store) WaitForLeader(ctx context.Context) (id, addr string, err error) {
	for {
		// Take the change channel before looking, so a change between
		// the look and the wait is not missed.
		changed := s.leaderChanged()
		if id, addr = s.Leader(); id != "" {
			return id, addr, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", "", ctxErr(ctx)
		case <-s.stopCh:
			return "", "", ErrShutdown
		}
	}
}

// AppliedIndex returns the index of the last entry this server's FSM has
// applied. Raft-internal entries (the no-op each new leader writes) are
// not applied to the FSM, so AppliedIndex can stay below raft's commit
// index until the next command arrives.
func (s *Store) AppliedIndex() uint64 { return s.fsm.applied.Load() }

// WaitApplied waits until this server's FSM has applied index, which
// should be an index returned by Apply or ApplyRaw (or any index at or
// below AppliedIndex of some server). It works on followers too: after it
// returns, local reads include that command. An index of a raft-internal
// entry is reached only when the next command is applied.
func (s *Store) WaitApplied(ctx context.Context, index uint64) error {
	if s.fsm.applied.Load() >= index {
		return nil
	}
	w := s.fsm.addWaiter(index)
	defer s.fsm.removeWaiter(w)
	select {
	case <-w.ch:
		return nil // reached: prefer it over a concurrent ctx or shutdown
	default:
	}
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-s.stopCh:
		return ErrShutdown
	}
}

// Stats returns raft's statistics plus this package's, as strings, for
// diagnostics (admin API, debug pages). Keys may change between versions.
func (s *Store) Stats() map[string]string {
	st := s.raft.Stats()
	st["node_id"] = s.id
	st["raft_addr"] = s.Addr()
	st["fsm_applied_index"] = strconv.FormatUint(s.fsm.applied.Load(), 10)
	st["fsm_applied_term"] = strconv.FormatUint(s.fsm.appliedTerm.Load(), 10)
	st["log_store_batches"] = strconv.FormatUint(s.bolt.batches.Load(), 10)
	st["log_store_unsynced_batches"] = strconv.FormatUint(s.bolt.unsynced.Load(), 10)
	st["log_store_entries"] = strconv.FormatUint(s.bolt.entries.Load(), 10)
	names := make([]string, 0, len(s.fsm.modules))
	for _, m := range s.fsm.modules {
		names = append(names, m.Name())
	}
	st["modules"] = strings.Join(names, ",")
	return st
}
