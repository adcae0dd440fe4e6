package rpc

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/gorilla/websocket"
)

// run is the connection's life: it starts the writer, runs the read loop on
// the calling goroutine, then tears down in order (writer stopped, transport
// closed, Calls failed, Handler.Closed, Done). The caller owns the goroutine
// that runs it; the writer is owned by run.
func (c *Conn) run() error {
	c.obs.ConnOpened(c.kind)
	c.log.Debug("connection opened")
	go c.writeLoop()
	err := c.readLoop()
	close(c.readExited)
	c.beginClose(closeCodeFor(err), "")
	<-c.writerDone // the writer closes the transport once it is done
	_ = c.tr.close()
	c.q.drop()
	c.failPending()
	c.callClosed()
	c.obs.ConnClosed(c.kind)
	code, reason := c.closeState()
	c.log.Debug("connection closed", "close_code", code, "reason", reason, "err", err)
	close(c.done)
	if isCleanEnd(err) {
		return nil
	}
	return err
}

func (c *Conn) callClosed() {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("Closed handler panic", "panic", p)
		}
	}()
	c.h.Closed(c)
}

// writeLoop is the only goroutine that writes data frames. Each wake-up
// drains the whole queue into one buffered write (one syscall per burst).
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	var tick <-chan time.Time
	if c.kind == kindWebSocket {
		t := time.NewTicker(c.cfg.PingInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.q.wake:
			if err := c.flush(); err != nil {
				c.writeFailed(err)
				return
			}
		case <-tick:
			if err := c.tr.ping(); err != nil {
				c.writeFailed(err)
				return
			}
		case <-c.closingCh:
			c.finish()
			return
		}
	}
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
		t := time.NewTimer(c.cfg.CloseGracePeriod)
		select {
		case <-c.readExited:
		case <-t.C:
		}
		t.Stop()
	}
	_ = c.tr.close()
}

// writeFailed ends the connection after a write error: closing the transport
// unblocks the reader, which finishes the teardown.
func (c *Conn) writeFailed(err error) {
	c.log.Debug("write failed", "err", err)
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
