package raftstore

import (
	"context"
	"time"

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
// lone write costs one extra entry. A forwarded command answered with
// its encoded result kicks lazily (kickNudge): it is nudged only when no
// other entry follows within lazyNudgeDelay.

// nudgeBody is the encoded NOOP the nudger proposes.
var nudgeBody = []byte{byte(concordv1.CommandType_COMMAND_TYPE_NOOP)}

// lazyNudgeDelay is how long a lazy kick waits for another entry to carry
// the commit index instead of a NOOP. It is a few client round trips on a
// LAN: a client writing in a loop through a follower sends its next write
// within it, and then no NOOP competes with that write for the leader's
// log and for the one AppendEntries in flight per follower.
const lazyNudgeDelay = 2 * time.Millisecond

// kickNudge asks the nudger to propagate the commit index; it never
// blocks. now: the origin waits for its own apply (no encoded result),
// so the NOOP goes at once. Otherwise the kick is lazy: the origin has
// answered already, and the commit only has to reach the followers soon
// (the origin connection's next read waits for it, subscribers there
// see its events), so the nudger first gives the next entry
// lazyNudgeDelay to carry it.
func (s *Store) kickNudge(now bool) {
	if now {
		select {
		case s.nudgeNowCh <- struct{}{}:
		default:
		}
	}
	select {
	case s.nudgeCh <- struct{}{}:
	default: // a kick is already pending; its NOOP covers this commit
	}
}

// startNudger starts the goroutine that turns kicks into NOOP entries;
// Shutdown stops it (stopCh) and waits for it (bg).
func (s *Store) startNudger() {
	s.bg.Go(func() {
		delay := time.NewTimer(lazyNudgeDelay)
		delay.Stop()
		defer delay.Stop()
		for {
			select {
			case <-s.stopCh:
				return
			case <-s.nudgeCh:
			}
			if !s.hasOtherServers() {
				continue // nobody to tell: a lone server's commit is already known
			}
			select {
			case <-s.nudgeNowCh:
			default:
				// Lazy: an entry appended after this point is replicated
				// with the commit index, as the NOOP would be.
				last := s.raft.LastIndex()
				delay.Reset(lazyNudgeDelay)
				select {
				case <-s.stopCh:
					return
				case <-s.nudgeNowCh:
					delay.Stop()
				case <-delay.C:
					if s.raft.LastIndex() > last {
						continue
					}
				}
			}
			// This NOOP covers every commit made so far: drop kicks that
			// are already pending.
			select {
			case <-s.nudgeCh:
			default:
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
