package rpc

import (
	"context"
	"sync/atomic"
	"time"
)

// Deferred is a request whose handler answers it after Handle returned:
// the connection's reader goes on to the next request meanwhile. See Defer.
type Deferred struct {
	c      *Conn
	id     []byte // nil for a notification: Reply only releases the slot
	method string
	start  time.Time
	done   atomic.Bool
}

// Defer lets the handler of the request being served answer it later with
// Reply, from any goroutine. The handler then returns at once (its return
// values are ignored) and the connection's reader serves the next request,
// so one peer can have many slow requests in flight — map/send waiting for
// another node's delivery acknowledgement is the case it exists for.
// Replies go out in completion order; JSON-RPC matches them by id. Requests
// still start in arrival order, which is what MAP's per-sender ordering
// needs.
//
// ctx must be the context Handle received, and Defer must be called before
// Handle returns. It reports false, and the handler must answer by
// returning as usual, when ctx is not a handler context, when the request
// is an element of a batch (a batch's replies form one frame), when
// Config.MaxDeferred is 0, or when the connection closed while Defer waited
// for a free slot (at most Config.MaxDeferred replies are outstanding per
// connection).
//
// The handler must call Reply exactly once (later calls are ignored); the
// connection's graceful close waits for outstanding replies, so a handler
// that never replies holds the close until the transport is torn down.
func Defer(ctx context.Context) (*Deferred, bool) {
	c, _ := ctx.Value(handlerCtxKey{}).(*Conn)
	if c == nil || c.cfg.MaxDeferred <= 0 || c.cur == nil || c.curInBatch || c.curDeferred != nil {
		return nil, false
	}
	if c.deferSlots == nil {
		// Made on first use (here, on the reader goroutine, before any
		// Deferred exists to read it): most sessions never defer.
		c.deferSlots = make(chan struct{}, c.cfg.MaxDeferred)
	}
	select {
	case c.deferSlots <- struct{}{}:
	default: // at the bound: backpressure on this peer's reader
		select {
		case c.deferSlots <- struct{}{}:
		case <-c.ctx.Done(): // ends first when the connection closes (beginClose)
			return nil, false
		}
	}
	c.mu.Lock()
	c.deferred++
	c.mu.Unlock()
	d := &Deferred{c: c, id: c.cur.ID, method: c.cur.Method}
	if c.obsOn {
		d.start = c.curStart
	}
	c.curDeferred = d
	return d, true
}

// Reply sends the deferred request's answer: result, or err mapped as for
// Handler.Handle's return values (an *Error as is, anything else -32603).
// It never blocks; after the connection closed the answer is dropped.
func (d *Deferred) Reply(result any, err error) {
	if !d.done.CompareAndSwap(false, true) {
		return
	}
	c := d.c
	defer c.deferDone()
	if d.id == nil {
		return
	}
	rerr := c.toRPCError(d.method, d.id, err)
	if rerr != nil {
		result = nil
	}
	if c.obsOn {
		code := 0
		if rerr != nil {
			code = rerr.Code
		}
		c.obs.RPCDone(d.method, code, time.Since(d.start))
	}
	f := getFrame()
	var encErr error
	if f.b, encErr = appendResponse(f.b, d.id, result, rerr); encErr != nil {
		c.logger().Error("encode result", "method", d.method, "err", encErr)
	}
	if c.q.forcePut(f) != nil {
		putFrame(f)
	}
}

// deferDone releases a deferred request's slot and, when a close was asked
// for while it was outstanding, starts the close once nothing is pending.
func (c *Conn) deferDone() {
	<-c.deferSlots
	c.mu.Lock()
	c.deferred--
	start := c.closeReq && !c.closing && !c.handling && c.deferred == 0
	c.mu.Unlock()
	if start {
		code, reason := c.closeState()
		c.beginClose(code, reason)
	}
}
