package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/gorilla/websocket"
)

// run is the connection's life: it arms the keepalive, runs the read loop on
// the calling goroutine, then tears down in order (writer finished,
// transport closed, Calls failed, Handler.Closed, Done). The caller owns the
// goroutine that runs it; the writer, started on demand by the send queue,
// is owned by run, which waits for its last run.
func (c *Conn) run() error {
	c.opened()
	err, _ := c.readLoop(false)
	return c.teardown(err)
}

// runDetached is run for a connection whose reader may move to a fresh
// goroutine whenever it is about to wait for input with nothing buffered
// (see readLoop): the goroutine that served requests has grown its stack,
// and an idle session would keep that stack for its whole life. end runs
// on the last reader goroutine once the connection is torn down; the
// caller's goroutine may return before that.
func (c *Conn) runDetached(end func(error)) {
	c.opened()
	c.readDetached(end)
}

func (c *Conn) readDetached(end func(error)) {
	err, hop := c.readLoop(true)
	if hop {
		go c.waitThenRead(end) // the same reader, continued on a small stack
		return
	}
	end(c.teardown(err))
}

// waitThenRead is the reader after a hop: it waits for input first, in a
// shallow frame, which is where an idle session spends its life.
func (c *Conn) waitThenRead(end func(error)) {
	if err := c.tr.(idleReleaser).waitInput(); err != nil {
		end(c.teardown(err))
		return
	}
	c.readDetached(end)
}

func (c *Conn) opened() {
	c.obs.ConnOpened(c.kind)
	c.debug("connection opened")
	if c.keepalive {
		keepalives.arm(c, c.cfg.PingInterval)
	}
}

// teardown ends the connection after its read loop returned err.
func (c *Conn) teardown(err error) error {
	c.closeLazy(&c.readExited)
	c.beginClose(closeCodeFor(err), "")
	<-c.lazyChan(&c.writerDone) // the writer closes the transport once it is done
	if c.keepalive {
		keepalives.disarm(c)
	}
	_ = c.tr.close()
	c.q.drop()
	c.failPending()
	c.callClosed()
	c.obs.ConnClosed(c.kind)
	code, reason := c.closeState()
	c.debug("connection closed", "close_code", code, "reason", reason, "err", err)
	c.closeLazy(&c.done)
	if isCleanEnd(err) {
		return nil
	}
	return err
}

func (c *Conn) callClosed() {
	c.endPreAuth() // the slot of a connection that never authenticated
	defer func() {
		if p := recover(); p != nil {
			c.logger().Error("Closed handler panic", "panic", p)
		}
	}()
	c.h.Closed(c)
}

// writeLoop is the only goroutine that writes data frames; the send queue
// starts it when there is something to do and it exits when there is
// nothing left (sendQueue.writerIdle). Each pass drains the whole queue into
// one buffered write (one syscall per burst). Its last run, after the close
// began, says goodbye and closes writerDone; so does a write failure.
func (c *Conn) writeLoop() {
	for {
		if err := c.flush(); err != nil {
			c.writeFailed(err)
			c.closeLazy(&c.writerDone)
			return
		}
		if c.q.takePing() {
			if err := c.tr.ping(); err != nil {
				c.writeFailed(err)
				c.closeLazy(&c.writerDone)
				return
			}
			keepalives.arm(c, c.cfg.PingInterval)
		}
		next, finish := c.q.writerIdle()
		switch {
		case finish:
			c.finish()
			c.closeLazy(&c.writerDone)
			return
		case !next:
			return
		}
	}
}

// writeInline is one writer pass run by the producer that queued a frame
// into an idle queue (sendQueue.putOwn), on its own goroutine: a request
// or reply with nothing else to send then costs no writer goroutine and no
// hand-off to it (on a saturated host each hand-off waits for a CPU;
// DESIGN.md). Anything left after the pass (frames queued meanwhile, a
// ping, the close) goes to the writer goroutine as usual; so does the
// goodbye, which waits for the reader.
func (c *Conn) writeInline() {
	if err := c.flush(); err != nil {
		c.writeFailed(err)
		c.closeLazy(&c.writerDone)
		return
	}
	if next, finish := c.q.writerIdle(); next || finish {
		c.q.startWriter()
	}
}

// putInline queues f and, when no writer is running, writes it on the
// calling goroutine (writeInline). Only WebSocket connections do: the
// other transports keep their writer goroutine.
func (c *Conn) putInline(ctx context.Context, f *frame) error {
	if c.kind != kindWebSocket {
		return c.q.put(ctx, f)
	}
	own, err := c.q.putOwn(ctx, f)
	if own {
		c.writeInline()
	}
	return err
}

// flush writes everything queued so far.
func (c *Conn) flush() error {
	frames := c.q.take(c.spare)
	if len(frames) == 0 {
		c.spare = frames
		return nil
	}
	err := c.tr.writeMessages(frames)
	for i, f := range frames {
		putFrame(f)
		frames[i] = nil
	}
	c.spare = frames[:0]
	return err
}

// finish flushes what was queued before the close, says goodbye, gives the
// peer CloseGracePeriod to answer, then tears the transport down.
func (c *Conn) finish() {
	if err := c.flush(); err != nil {
		_ = c.tr.close()
		return
	}
	code, reason := c.closeState()
	if err := c.tr.sendClose(code, reason); err == nil {
		c.closeLazy(&c.goodbyeOut)
		t := time.NewTimer(c.cfg.CloseGracePeriod)
		select {
		case <-c.lazyChan(&c.readExited):
		case <-t.C:
		}
		t.Stop()
	}
	_ = c.tr.close()
}

// writeFailed ends the connection after a write error: closing the transport
// unblocks the reader, which finishes the teardown.
func (c *Conn) writeFailed(err error) {
	c.debug("write failed", "err", err)
	c.beginClose(closeInternal, "")
	_ = c.tr.close()
}

// closeCodeFor picks the close code we report when the read side ended.
func closeCodeFor(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return closeGoingAway
}

// isCleanEnd reports whether a read error is an ordinary end of connection.
func isCleanEnd(err error) bool {
	var ce *websocket.CloseError
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, errTransportClosed) || errors.Is(err, io.ErrClosedPipe) ||
		(errors.As(err, &ce) && (ce.Code == closeNormal || ce.Code == closeGoingAway || ce.Code == websocket.CloseNoStatusReceived))
}
