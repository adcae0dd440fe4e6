package raftstore

import (
	"context"

	"github.com/hashicorp/raft"
)

// observationBuffer is the raft observer's channel size. raft never blocks
// on a non-blocking observer; it drops observations when the buffer is
// full, and the loop re-reads raft's live state on each one, so only a
// burst larger than this in one instant could delay (not lose) an update
// until the next observation.
const observationBuffer = 64

// subscriber is one SubscribeLeadership channel. It has room for one value;
// the fan-out replaces an unread value with the newer one, so a slow
// reader sees the latest state and never blocks the fan-out.
type subscriber struct {
	ch chan bool
}

// startLeadershipLoop registers a raft observer and starts the goroutine
// that turns its observations into leadership notifications.
func (s *Store) startLeadershipLoop() {
	s.leaderChg = make(chan struct{})
	s.obsCh = make(chan raft.Observation, observationBuffer)
	s.observer = raft.NewObserver(s.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	s.raft.RegisterObserver(s.observer)
	s.bg.Add(1)
	go s.leadershipLoop()
}

// leadershipLoop runs until Shutdown closes stopCh.
func (s *Store) leadershipLoop() {
	defer s.bg.Done()
	for {
		select {
		case <-s.stopCh:
			return
		case o := <-s.obsCh:
			if _, ok := o.Data.(raft.LeaderObservation); ok {
				s.signalLeaderChange()
			}
			s.publishLeadership()
		}
	}
}

// publishLeadership sends this server's leadership to every subscriber if
// it changed since the last send.
func (s *Store) publishLeadership() {
	leader := s.raft.State() == raft.Leader
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if leader == s.isLeader {
		return
	}
	s.isLeader = leader
	s.log.Info("leadership changed", "is_leader", leader, "term", s.raft.CurrentTerm())
	for sub := range s.subs {
		sub.offer(leader)
	}
}

// signalLeaderChange wakes WaitForLeader callers.
func (s *Store) signalLeaderChange() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	close(s.leaderChg)
	s.leaderChg = make(chan struct{})
}

// leaderChanged returns a channel closed at the next leader change.
func (s *Store) leaderChanged() <-chan struct{} {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	return s.leaderChg
}

// offer replaces any unread value with v without blocking. Only the
// fan-out (under subsMu) sends, so the second send always has room.
func (sub *subscriber) offer(v bool) {
	select {
	case sub.ch <- v:
		return
	default:
	}
	select {
	case <-sub.ch:
	default:
	}
	sub.ch <- v
}

// SubscribeLeadership returns a channel that receives true when this
// server becomes leader and false when it stops being leader. The current
// state is delivered first. Values coalesce: a slow reader sees the latest
// state, never a backlog, and raft is never blocked by a reader. cancel
// unsubscribes and closes the channel; Shutdown closes it too. cancel may
// be called more than once, from any goroutine.
func (s *Store) SubscribeLeadership() (<-chan bool, func()) {
	sub := &subscriber{ch: make(chan bool, 1)}
	s.subsMu.Lock()
	select {
	case <-s.stopCh:
		s.subsMu.Unlock()
		close(sub.ch)
		return sub.ch, func() {}
	default:
	}
	sub.ch <- s.isLeader
	s.subs[sub] = struct{}{}
	s.subsMu.Unlock()
	return sub.ch, func() {
		s.subsMu.Lock()
		defer s.subsMu.Unlock()
		if _, ok := s.subs[sub]; ok {
			delete(s.subs, sub)
			close(sub.ch)
		}
	}
}

// closeSubscribers closes every subscriber's channel; called by Shutdown
// after the loop has stopped.
func (s *Store) closeSubscribers() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for sub := range s.subs {
		delete(s.subs, sub)
		close(sub.ch)
	}
}

// WaitLeadership waits until this server is the leader. Use it after
// BootstrapSelf on a single-node cluster; on a multi-node cluster another
// server may win, and this waits until ctx ends.
func (s *Store) WaitLeadership(ctx context.Context) error {
	ch, cancel := s.SubscribeLeadership()
	defer cancel()
	for {
		select {
		case leader, ok := <-ch:
			if !ok {
				return ErrShutdown
			}
			if leader {
				return nil
			}
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
}
