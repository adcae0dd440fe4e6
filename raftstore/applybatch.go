package raftstore

import (
	"context"

	"github.com/hashicorp/raft"
)

// batchingFSM is the FSM raft runs: the fsm, with each ApplyBatch
// bracketed in progress so that WaitApplyBatch knows when a batch ends.
type batchingFSM struct{ *fsm }

var _ raft.BatchingFSM = batchingFSM{}

// ApplyBatch implements raft.BatchingFSM.
func (b batchingFSM) ApplyBatch(logs []*raft.Log) []any {
	b.beginBatch()
	defer b.endBatch()
	return b.fsm.ApplyBatch(logs)
}

// WaitApplyBatch waits until the FSM has finished the batch of committed
// entries it is applying, if any; it returns at once when none is being
// applied, and early when ctx ends or the store shuts down (the caller
// then just reads sooner).
//
// It is for goroutines woken by a module's change notification, which
// modules signal per entry: raft hands a follower's FSM the ~100 entries
// of one paced AppendEntries at once, and a watcher that reads right away
// is woken again by the next entry, up to once per entry, its reads
// contending with the FSM's writes for the module's lock meanwhile
// (DESIGN.md, "Eighth round"). Waiting for the batch's end costs it one
// wake-up per batch and delays what it reads by at most the rest of the
// batch, which it would otherwise see only piecemeal.
func (s *Store) WaitApplyBatch(ctx context.Context) {
	done := s.fsm.batchDone()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-s.stopCh:
	}
}
