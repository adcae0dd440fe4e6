package rpc

import (
	"context"
	"sync"
	"time"
)

// connCtx is a connection's context: done once the connection starts
// closing (or its base context ends), carrying the connection under
// handlerCtxKey for Defer and ErrCallInHandler. Handlers receive it.
//
// Why not context.WithCancel + WithValue: a handler that derives a timeout
// from its context (every Raft write does) makes the standard cancelCtx
// allocate a children map and a done channel, which it keeps after the
// child is gone. An idle session would hold them, plus the two context
// values, for its whole life (~600 bytes; issue 10). connCtx is embedded
// in the Conn, and children register through AfterFunc (context's
// afterFuncer path), in an intrusive list: one pointer while idle, and
// two allocations per registration (the entry and its stop method value).
type connCtx struct {
	base context.Context // values and deadline; its end cancels this one
	c    *Conn
	done chan struct{}

	mu       sync.Mutex
	canceled bool
	afters   *afterFunc  // registered and not stopped, newest first; nil when none
	stopBase func() bool // unregisters from base, if base can end
}

// afterFunc is one AfterFunc registration, a node of connCtx.afters.
// linked, prev and next are guarded by x.mu; next is also read, without
// the lock, by cancel once it has unlinked every node.
type afterFunc struct {
	x          *connCtx
	f          func()
	prev, next *afterFunc
	linked     bool
}

var _ context.Context = (*connCtx)(nil)

func (x *connCtx) init(base context.Context, c *Conn) {
	x.base, x.c, x.done = base, c, make(chan struct{})
	if base.Done() != nil {
		x.stopBase = context.AfterFunc(base, x.cancel)
	}
}

// Deadline implements context.Context.
func (x *connCtx) Deadline() (time.Time, bool) { return x.base.Deadline() }

// Done implements context.Context.
func (x *connCtx) Done() <-chan struct{} { return x.done }

// Err implements context.Context.
func (x *connCtx) Err() error {
	select {
	case <-x.done:
		return context.Canceled
	default:
		return nil
	}
}

// Value implements context.Context.
func (x *connCtx) Value(key any) any {
	if key == (handlerCtxKey{}) {
		return x.c
	}
	return x.base.Value(key)
}

// AfterFunc is what context.WithCancel, WithTimeout and AfterFunc use to
// hear of this context's end without a goroutine: f runs in its own
// goroutine once the connection closes (at once if it has); stop reports
// whether it unregistered f before that.
func (x *connCtx) AfterFunc(f func()) (stop func() bool) {
	x.mu.Lock()
	if x.canceled {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{x: x, f: f, next: x.afters, linked: true}
	if a.next != nil {
		a.next.prev = a
	}
	x.afters = a
	x.mu.Unlock()
	return a.stop
}

// stop unregisters a; false if it was not registered any more (stopped,
// or the context ended and a.f runs).
func (a *afterFunc) stop() bool {
	x := a.x
	x.mu.Lock()
	defer x.mu.Unlock()
	if !a.linked {
		return false
	}
	a.linked = false
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		x.afters = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	}
	a.prev, a.next = nil, nil
	return true
}

// cancel ends the context (idempotent) and runs the registered functions.
func (x *connCtx) cancel() {
	x.mu.Lock()
	if x.canceled {
		x.mu.Unlock()
		return
	}
	x.canceled = true
	close(x.done)
	afters := x.afters
	x.afters = nil
	for a := afters; a != nil; a = a.next {
		a.linked = false // stop now reports false and leaves next alone
	}
	stopBase := x.stopBase
	x.mu.Unlock()
	if stopBase != nil {
		stopBase()
	}
	for a := afters; a != nil; a = a.next {
		go a.f()
	}
}
