package raftstore

import (
	"sync"
	"sync/atomic"
)

// progress tracks how far the FSM has applied, wakes WaitApplied callers,
// and keeps the FSM responses that forwarded commands still need (a
// follower's FSM computes the result of a command the leader committed,
// but raft discards responses on followers).
type progress struct {
	// applied and appliedTerm are the index and term of the last entry
	// the FSM applied (commands and configuration changes; raft does not
	// hand the FSM its internal no-op and barrier entries).
	applied     atomic.Uint64
	appliedTerm atomic.Uint64

	mu      sync.Mutex
	waiters map[*waiter]struct{}      // guarded by mu
	calls   map[*forwardCall]struct{} // forwarded commands in flight; guarded by mu
	results map[uint64]any            // responses kept while calls exist; guarded by mu
}

// waiter is one WaitApplied call; ch is closed once applied >= index.
type waiter struct {
	index uint64
	ch    chan struct{}
}

// forwardCall is one command forwarded to the leader. Its index will be
// above after: the leader appends it only after the call began, when this
// FSM had applied at most after.
type forwardCall struct {
	after uint64
}

func (p *progress) init() {
	p.waiters = make(map[*waiter]struct{})
	p.calls = make(map[*forwardCall]struct{})
	p.results = make(map[uint64]any)
}

// advance records that everything up to index has been applied, keeps
// resp if a forwarded call may need it, and wakes satisfied waiters. The
// check for calls and the move of applied happen under one lock, so a call
// that begins concurrently either sees the new position or has its result
// kept.
func (p *progress) advance(index, term uint64, resp any, keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if keep && len(p.calls) > 0 {
		p.results[index] = resp
	}
	p.applied.Store(index)
	p.appliedTerm.Store(term)
	for w := range p.waiters {
		if w.index <= index {
			close(w.ch)
			delete(p.waiters, w)
		}
	}
}

// addWaiter registers a waiter for index; the caller must removeWaiter.
// The returned waiter's channel is already closed if index was reached.
func (p *progress) addWaiter(index uint64) *waiter {
	w := &waiter{index: index, ch: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.applied.Load() >= index {
		close(w.ch)
		return w
	}
	p.waiters[w] = struct{}{}
	return w
}

func (p *progress) removeWaiter(w *waiter) {
	p.mu.Lock()
	delete(p.waiters, w)
	p.mu.Unlock()
}

// beginForward starts keeping responses for a forwarded command.
func (p *progress) beginForward() *forwardCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &forwardCall{after: p.applied.Load()}
	p.calls[c] = struct{}{}
	return c
}

// takeResult returns (and forgets) the response kept for index. ok is false
// when none was kept: the entry reached this FSM through a snapshot.
func (p *progress) takeResult(index uint64) (resp any, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp, ok = p.results[index]
	delete(p.results, index)
	return resp, ok
}

// endForward stops keeping responses for c, dropping those no remaining
// call can need (at or below every remaining call's starting point).
func (p *progress) endForward(c *forwardCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.calls, c)
	if len(p.calls) == 0 {
		clear(p.results)
		return
	}
	floor := ^uint64(0)
	for other := range p.calls {
		floor = min(floor, other.after)
	}
	for idx := range p.results {
		if idx <= floor {
			delete(p.results, idx)
		}
	}
}
