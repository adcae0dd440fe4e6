package rpc

import "context"

// AfterReply registers fn to run once the reply to the request being
// handled has been queued on its connection (for a batch, the batch's
// reply). ctx must be the context Handle received; AfterReply reports false,
// and does not keep fn, when it is not (then the caller must find another
// way to order its work after the reply).
//
// It exists so a handler can start pushing notifications that refer to
// something its reply creates — a subscription's first map/event — without
// a client seeing the notification before the reply that names it. fn runs
// on the connection's reader goroutine, before the next request is read:
// keep it short and never block in it.
func AfterReply(ctx context.Context, fn func()) bool {
	c, _ := ctx.Value(handlerCtxKey{}).(*Conn)
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.handling {
		return false
	}
	c.afterReply = append(c.afterReply, fn)
	return true
}

// runAfterReply runs and clears the functions registered while the current
// frame was served. Called by the reader after queueing the frame's reply.
func (c *Conn) runAfterReply() {
	c.mu.Lock()
	fns := c.afterReply
	c.afterReply = nil
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
