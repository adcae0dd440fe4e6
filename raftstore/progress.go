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
	waiters map[*waiter]struct{} // guarded by mu
	// calls are the forwarded commands begun, in the order they began,
	// so their after values never decrease; ended ones leave the front
	// lazily. live counts those not ended. Guarded by mu.
	calls fifo[*forwardCall]
	live  int
	// results are the responses kept while calls are live, and kept
	// their indexes in apply order (increasing), so the ones no live call
	// can need are cut from the front. Guarded by mu.
	results map[uint64]any
	kept    fifo[uint64]

	// inBatch is set while the FSM applies a batch raft handed it;
	// batchEnd, when someone waits, is closed when that batch ends
	// (WaitApplyBatch). Guarded by mu.
	inBatch  bool
	batchEnd chan struct{}
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
	ended bool // guarded by progress.mu
}

func (p *progress) init() {
	p.waiters = make(map[*waiter]struct{})
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
	if keep && p.live > 0 {
		p.results[index] = resp
		p.kept.push(index)
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

// beginBatch and endBatch bracket one ApplyBatch call (batchingFSM).
func (p *progress) beginBatch() {
	p.mu.Lock()
	p.inBatch = true
	p.mu.Unlock()
}

func (p *progress) endBatch() {
	p.mu.Lock()
	p.inBatch = false
	if p.batchEnd != nil {
		close(p.batchEnd)
		p.batchEnd = nil
	}
	p.mu.Unlock()
}

// batchDone returns nil when no batch is being applied, else a channel
// closed once the current one ends.
func (p *progress) batchDone() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inBatch {
		return nil
	}
	if p.batchEnd == nil {
		p.batchEnd = make(chan struct{})
	}
	return p.batchEnd
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
	p.calls.push(c)
	p.live++
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
// call can need (at or below every remaining call's starting point, which
// is the oldest live call's: calls begin in order of after). Amortized
// O(1): ended calls and dropped results leave only from the fronts.
func (p *progress) endForward(c *forwardCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.ended = true
	p.live--
	for p.calls.len() > 0 && p.calls.front().ended {
		p.calls.pop()
	}
	if p.live == 0 {
		clear(p.results)
		p.kept.reset()
		return
	}
	floor := p.calls.front().after
	for p.kept.len() > 0 && p.kept.front() <= floor {
		delete(p.results, p.kept.pop())
	}
}

// fifo is a queue on a slice: push at the back, pop from the front, the
// popped prefix reclaimed once it is most of the slice.
type fifo[T any] struct {
	s    []T
	head int
}

func (q *fifo[T]) len() int { return len(q.s) - q.head }
func (q *fifo[T]) front() T { return q.s[q.head] }
func (q *fifo[T]) push(v T) { q.s = append(q.s, v) }
func (q *fifo[T]) reset()   { clear(q.s); q.s, q.head = q.s[:0], 0 }

func (q *fifo[T]) pop() T {
	v := q.s[q.head]
	var zero T
	q.s[q.head] = zero // no reference kept from the dead prefix
	q.head++
	if q.head == len(q.s) {
		q.s, q.head = q.s[:0], 0
	} else if q.head >= 64 && q.head*2 >= len(q.s) {
		n := copy(q.s, q.s[q.head:])
		clear(q.s[n:])
		q.s, q.head = q.s[:n], 0
	}
	return v
}
