package rpc

import (
	"net"
	"sync"
	"time"

	"github.com/concordmap/concord/federation/connclose"
)

// corkLimit is the most a corked write accumulates before it is pushed to
// the socket (bounds memory and latency of one drain).
const corkLimit = 256 << 10

// corkConn wraps the socket under the WebSocket library. While the writer
// goroutine has it corked, frame writes are gathered in memory and reach the
// kernel as one write(2) at uncork; this is what turns a burst of N frames
// into one syscall (ARCHITECTURE.md, hot-path notes). Uncorked writes (the
// handshake, pongs the library sends from the reader goroutine, pings and
// close frames) go straight through.
//
// corkConn also owns write deadlines: every real write gets one of
// writeTimeout, and the library's per-frame SetWriteDeadline calls are
// ignored, which saves a timer update per frame.
type corkConn struct {
	net.Conn
	writeTimeout time.Duration

	mu        sync.Mutex // serializes real writes and guards corked/buf/closeSent
	corked    bool
	closeSent bool // a close frame went (or is going) out: no data frames after it
	buf       []byte
}

func newCorkConn(nc net.Conn, writeTimeout time.Duration) *corkConn {
	return &corkConn{Conn: nc, writeTimeout: writeTimeout}
}

// Write buffers p while corked, else writes it with a deadline.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		if len(c.buf)+len(p) <= corkLimit {
			c.buf = append(c.buf, p...)
			return len(p), nil
		}
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) <= corkLimit {
			c.buf = append(c.buf, p...)
			return len(p), nil
		}
	}
	return c.writeLocked(p)
}

func (c *corkConn) writeLocked(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.writeLocked(c.buf)
	c.buf = c.buf[:0]
	return err
}

// Close closes the socket promptly: on a server, corkConn sits above TLS,
// whose close_notify would wait 5 s for a peer that stopped reading
// (federation/connclose).
func (c *corkConn) Close() error { return connclose.Close(c.Conn, connclose.Grace) }

// SetWriteDeadline is ignored: see the type comment.
func (c *corkConn) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline only forwards the read half, for the same reason.
func (c *corkConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

// corkBufPool lends gather buffers to connections for the length of one
// drain, so busy connections reuse them and idle ones hold none.
var corkBufPool = sync.Pool{New: func() any { b := make([]byte, 0, corkLimit); return &b }}

func (c *corkConn) cork() {
	bp := corkBufPool.Get().(*[]byte)
	c.mu.Lock()
	c.corked = true
	c.buf = (*bp)[:0]
	c.mu.Unlock()
}

// markCloseSent records that a close frame is about to be written; data
// frames written by writeTextFrames after this fail with
// websocket.ErrCloseSent, as the library's own writer does.
func (c *corkConn) markCloseSent() {
	c.mu.Lock()
	c.closeSent = true
	c.mu.Unlock()
}

// uncork writes what was gathered as one write and stops buffering.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	err := c.flushLocked()
	if cap(c.buf) == corkLimit {
		b := c.buf[:0]
		corkBufPool.Put(&b)
	}
	c.buf = nil
	return err
}
