package raftstore

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logCap bounds the raft log by count: once more than Config.MaxLogEntries
// entries were applied since the last snapshot, it asks raft for one at
// once instead of waiting for raft's SnapshotInterval timer (120-240 s by
// default, during which a busy cluster appends hundreds of thousands of
// entries). The log lives in bolt, whose file is memory-mapped: its size,
// and the node's resident memory, then follow the configuration, not the
// write rate. The FSM calls applied after every entry (cheap: one atomic
// load); the snapshot itself runs on the Store's logCap goroutine.
type logCap struct {
	limit uint64
	next  atomic.Uint64 // applied index at which to look again
	kick  chan struct{} // cap 1
}

func newLogCap(limit uint64) *logCap {
	c := &logCap{limit: limit, kick: make(chan struct{}, 1)}
	c.next.Store(limit)
	return c
}

// applied is called by the FSM with each applied index (nil-safe: no cap).
func (c *logCap) applied(index uint64) {
	if c == nil || index < c.next.Load() {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// startLogCap runs the snapshotting goroutine, owned by the Store (stopped
// by stopCh; a snapshot under way ends when raft shuts down).
func (s *Store) startLogCap() {
	if s.fsm.logCap == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for {
			select {
			case <-s.stopCh:
				return
			case <-s.fsm.logCap.kick:
				s.capLog()
			}
		}
	}()
}

// capLog snapshots if the log has grown past the cap since raft's last
// snapshot (raft may have taken one on its timer meanwhile), and sets the
// next index to look at.
func (s *Store) capLog() {
	c := s.fsm.logCap
	applied := s.fsm.applied.Load()
	lastSnap, _ := strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64)
	if applied < lastSnap+c.limit {
		c.next.Store(lastSnap + c.limit)
		return
	}
	err := s.raft.Snapshot().Error()
	c.next.Store(applied + c.limit)
	switch {
	case err == nil:
		s.log.Debug("log cap snapshot taken", "index", applied)
	case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
	default:
		s.log.Warn("log cap snapshot failed", "index", applied, "err", err)
	}
}
