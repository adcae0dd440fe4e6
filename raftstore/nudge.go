package raftstore

import (
	"context"

	"github.com/hashicorp/raft"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Commit nudging: a forwarded command's origin (a follower) answers its
// caller only once its own FSM has applied the command, and a follower
// learns that an entry is committed only from the leader's next
// AppendEntries. hashicorp/raft sends one when new entries are appended,
// or else after CommitTimeout (50-100 ms at the default multiplier), so a
// lone write through a follower used to wait for that timer. After the
// leader commits a forwarded command, the nudger therefore appends one
// NOOP: its AppendEntries is built after the commit, so it carries the
// new commit index to every follower at once.
//
// Kicks coalesce: one NOOP in flight at a time, and every kick that
// arrives meanwhile is covered by one more NOOP after it. Under load the
// NOOP rides in a group commit with other entries (no extra fsync); a
// lone write costs one extra entry.

// nudgeBody is the encoded NOOP the nudger proposes.
var nudgeBody = []byte{byte(concordv1.CommandType_COMMAND_TYPE_NOOP)}

// kickNudge asks the nudger to propagate the commit index; it never
// blocks.
func (s *Store) kickNudge() {
	select {
	case s.nudgeCh <- struct{}{}:
	default: // a kick is already pending; its NOOP covers this commit
	}
}

// startNudger starts the goroutine that turns kicks into NOOP entries;
// Shutdown stops it (stopCh) and waits for it (bg).
func (s *Store) startNudger() {
	s.bg.Go(func() {
		for {
			select {
			case <-s.stopCh:
				return
			case <-s.nudgeCh:
			}
			if !s.hasOtherServers() {
				continue // nobody to tell: a lone server's commit is already known
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ApplyTimeout)
			// Errors need no handling: a server that stopped leading has
			// nothing to propagate, and the new leader's first entry
			// carries its commit index; propose refuses after Shutdown.
			if _, _, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, nudgeBody); err != nil {
				s.log.Debug("commit nudge not committed", "err", err)
			}
			cancel()
		}
	})
}

// hasOtherServers reports whether the latest Raft configuration names a
// server besides this one. GetConfiguration answers from a cached copy,
// so this costs no trip through raft's main loop.
func (s *Store) hasOtherServers() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return true // unknown: nudge, as before
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID != raft.ServerID(s.cfg.NodeID) {
			return true
		}
	}
	return false
}
