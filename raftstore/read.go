package raftstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Read consistency levels (see DESIGN.md, "Reads"):
//
//   - Local (the default, no call needed): read the module's state on any
//     server. Fast; may be stale by the replication lag, and on a
//     partitioned ex-leader by up to LeaderLeaseTimeout plus lag. Still
//     monotonic on one server. Pair with WaitApplied(index) to read your own
//     write on a follower.
//   - Linearizable: call LinearizableRead on the leader, then read local
//     state. The read reflects every write acknowledged before
//     LinearizableRead was called. Followers get *NotLeaderError and
//     forward the read.

// VerifyLeader confirms, with one heartbeat round to a quorum (no log
// write), that this server is still the leader. Non-leaders, and a leader
// that has been deposed without noticing yet, get *NotLeaderError,
// ErrNoLeader or ErrLeadershipLost.
func (s *Store) VerifyLeader(ctx context.Context) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	err := s.awaitWithCtx(ctx, func(time.Duration) raft.Future { return s.raft.VerifyLeader() })
	if err != nil {
		return fmt.Errorf("verify leader: %w", err)
	}
	return nil
}

// LinearizableRead makes the caller's next read of local module state
// linearizable (raft §6.4, ReadIndex): it confirms leadership with a quorum
// round, takes the commit index at that moment, and waits until this FSM
// has applied it. Call it on the leader before reading; on a follower it
// returns *NotLeaderError (forward the read). No log entry is written,
// except once per term: until a command of the current term has been
// applied here, the FSM may be behind the no-op raft writes at the start
// of a term (which never reaches the FSM), so a NOOP command is committed
// first to bring the FSM past it.
func (s *Store) LinearizableRead(ctx context.Context) error {
	if err := s.VerifyLeader(ctx); err != nil {
		return err
	}
	term := s.raft.CurrentTerm()
	readIndex := s.raft.CommitIndex()
	if s.fsm.appliedTerm.Load() < term {
		// The NOOP commits in this term after readIndex; when Apply
		// returns, the FSM has applied everything up to it.
		if _, _, err := s.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "read barrier"}); err != nil {
			return fmt.Errorf("read barrier: %w", err)
		}
		return nil
	}
	// Every entry between the FSM's position and readIndex is a command
	// or configuration change of this term, which the FSM tracks, so the
	// wait ends as soon as they are applied.
	ctx, cancel := s.withDefaultTimeout(ctx)
	defer cancel()
	return s.WaitApplied(ctx, readIndex)
}
