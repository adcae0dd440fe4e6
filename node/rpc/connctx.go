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
// afterFuncer path), in a slice dropped once empty.
type connCtx struct {
	base context.Context // values and deadline; its end cancels this one
	c    *Conn
	done chan struct{}

	mu       sync.Mutex
	canceled bool
	afters   []*afterFunc // registered and not stopped; nil when none
	stopBase func() bool  // unregisters from base, if base can end
}

type afterFunc struct{ f func() }

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
	a := &afterFunc{f: f}
	x.afters = append(x.afters, a)
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		for i, b := range x.afters {
			if b == a {
				x.afters = append(x.afters[:i], x.afters[i+1:]...)
				if len(x.afters) == 0 {
					x.afters = nil // an idle connection keeps no slice
				}
				return true
			}
		}
		return false
	}
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
	stopBase := x.stopBase
	x.mu.Unlock()
	if stopBase != nil {
		stopBase()
	}
	for _, a := range afters {
		go a.f()
	}
}
