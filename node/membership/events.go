package membership

import (
	"slices"
	"strings"
	"sync"
)

// Subscription delivers member events to one consumer (typically the Raft
// reconciler) without ever blocking memberlist: memberlist calls its event
// hooks while holding its node lock, so a slow consumer must not stall
// gossip. Events wait in a per-member slot, the newest replacing an older
// one for the same member, so pending memory is bounded by the member count
// and a consumer that falls behind sees each member's latest change.
//
// Consume it as a level trigger: on every receive from Changed, call Drain
// (and, if useful, Membership.Members) and act on the current state.
//
// All methods are safe for concurrent use.
type Subscription struct {
	m       *Membership
	changed chan struct{} // capacity 1: a pending signal coalesces the rest

	mu      sync.Mutex
	pending map[string]Event
	closed  bool
}

// Subscribe returns a new subscription. It may be called before Start (to
// see the local node's own join); after Shutdown it returns a subscription
// that is already closed. Call Close when done.
func (m *Membership) Subscribe() *Subscription {
	s := &Subscription{m: m, changed: make(chan struct{}, 1), pending: make(map[string]Event)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stateShut {
		s.close()
		return s
	}
	m.subs[s] = struct{}{}
	return s
}

// Changed receives a value when events are pending. It is closed when the
// subscription is closed or the Membership shuts down; events pending at
// that moment can still be drained.
func (s *Subscription) Changed() <-chan struct{} { return s.changed }

// Drain returns the pending events, at most one per member, ordered by
// member id, and clears them. It returns nil when none are pending.
func (s *Subscription) Drain() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	out := make([]Event, 0, len(s.pending))
	for _, ev := range s.pending {
		out = append(out, ev)
	}
	clear(s.pending)
	slices.SortFunc(out, func(a, b Event) int { return strings.Compare(a.Member.ID, b.Member.ID) })
	return out
}

// Close stops delivery and closes Changed. It is idempotent.
func (s *Subscription) Close() {
	s.m.mu.Lock()
	delete(s.m.subs, s)
	s.m.mu.Unlock()
	s.close()
}

// publish records ev and signals the consumer without blocking. Called with
// Membership.mu held (lock order: Membership.mu, then Subscription.mu).
func (s *Subscription) publish(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.pending[ev.Member.ID] = ev
	select {
	case s.changed <- struct{}{}:
	default: // a signal is already pending; the consumer will drain this too
	}
}

func (s *Subscription) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
	}
}
