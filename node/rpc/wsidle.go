package rpc

import (
	"bufio"
	"io"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Idle server-side WebSocket connections (the bulk of a node's sessions)
// hold almost nothing: no read buffer, no writer goroutine, and one reader
// goroutine with a shallow stack. How:
//
//   - The library reads through br, the *bufio.Reader net/http handed over
//     at hijack. Between messages, when nothing is buffered, releaseIfIdle
//     returns br's buffer (to busyReaderPool) and leaves br empty; the
//     reader then hops to a fresh goroutine (Conn.runDetached), whose stack
//     starts small, and waits in waitInput, reading the socket directly
//     into the wakeReadSize array.
//   - When input arrives, br gets a pooled buffer fronted by what was read.
//   - Before letting go, the reader lingers (Config.ReaderLinger): it
//     waits for input on the goroutine that served the last message, with
//     a short read deadline and its buffer kept, so a client sending
//     request after request is served without a goroutine start, a stack
//     regrowth and a second read per request. Only when the linger passes
//     with no input does it release and hop.
//   - Keepalive traffic does not wake the library: complete ping and pong
//     frames read while idle are answered here (serveIdleControl), and the
//     connection goes on waiting. Otherwise the library, which loops over
//     control frames until a data frame comes, would wait inside with a
//     borrowed buffer after every ping.

// wakeReadSize is how much an idle connection reads when input arrives:
// enough for a pong, or a ping with up to 26 bytes of payload, to be
// answered without waking the library; a data frame needs a second read
// whatever the size. Every idle session holds this array.
const wakeReadSize = 32

// busyReaderPool lends wsReadBufferSize read buffers to server-side
// connections while they have input.
var busyReaderPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, wsReadBufferSize) }}

// wsIdleState is the server-side part of wsTransport (reader goroutine only).
type wsIdleState struct {
	br     *bufio.Reader // nil on the client side: nothing is released
	busy   *bufio.Reader // the pooled reader whose buffer br holds, if any
	idle   bool          // br holds nothing: waitInput before reading
	wake   [wakeReadSize]byte
	prefix prefixReader // what waitInput read, then the socket
	// readDeadline is the keepalive read deadline last set (ponged); a
	// linger shortens the socket's deadline and then restores this one.
	readDeadline time.Time
}

// prefixReader returns pre, then reads from r.
type prefixReader struct {
	pre []byte
	r   io.Reader
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// releaseIfIdle implements idleReleaser: with nothing buffered, br lets go
// of its buffer and so does the message buffer.
func (t *wsTransport) releaseIfIdle() bool {
	if t.br == nil || t.br.Buffered() > 0 || len(t.prefix.pre) > 0 {
		return false
	}
	t.buf = nil
	if !t.idle {
		if t.busy != nil {
			t.busy.Reset(nil)
			busyReaderPool.Put(t.busy)
			t.busy = nil
		}
		*t.br = bufio.Reader{} // the library keeps the pointer br; only its contents change
		t.idle = true
	}
	return true
}

// inputBuffered implements idleReleaser.
func (t *wsTransport) inputBuffered() bool {
	return t.br == nil || t.br.Buffered() > 0 || len(t.prefix.pre) > 0
}

// waitInput implements idleReleaser: it blocks until the idle connection
// has input other than keepalives (or fails), then gives br a pooled
// buffer, with what was read served first. The read deadline (pong
// timeout) applies here as it would to the library's read.
func (t *wsTransport) waitInput() error {
	for t.idle {
		n, err := t.cork.Conn.Read(t.wake[:])
		if n == 0 {
			if err == nil {
				err = io.ErrNoProgress
			}
			return err
		}
		if t.serveIdleControl(t.wake[:n]) {
			continue // an error, if any, shows on the next read
		}
		t.wakeWith(n)
	}
	return nil
}

// linger implements idleReleaser: it waits up to d for more input with
// the read buffer kept, so what arrives is read straight into it (one
// read, the same as a busy connection's). Errors other than the
// linger's own timeout are left for the next read to report. The
// keepalive deadline is back in force when it returns, and keepalive
// frames read are served (the reader then hops as after a timeout).
func (t *wsTransport) linger(d time.Duration) {
	until := time.Now().Add(d)
	if t.br == nil || t.idle || !until.Before(t.readDeadline) {
		return
	}
	if t.cork.Conn.SetReadDeadline(until) != nil {
		return
	}
	_, _ = t.br.Peek(1) // bufio keeps what it read and forgets the error
	_ = t.cork.Conn.SetReadDeadline(t.readDeadline)
	// Keepalives that came during the linger are answered here, as while
	// idle: left to the library, it would wait for the next data frame
	// holding this buffer and stack.
	if buf, _ := t.br.Peek(t.br.Buffered()); len(buf) > 0 && t.serveIdleControl(buf) {
		_, _ = t.br.Discard(len(buf))
	}
}

// wakeWith gives br a pooled buffer fronted by the n bytes read into wake.
func (t *wsTransport) wakeWith(n int) {
	t.prefix = prefixReader{pre: t.wake[:n], r: t.cork}
	t.busy = busyReaderPool.Get().(*bufio.Reader)
	t.busy.Reset(&t.prefix)
	*t.br = *t.busy
	t.idle = false
}

// serveIdleControl handles b if it is nothing but complete, valid, masked
// ping and pong frames from the client: a pong extends the read deadline, a
// ping is answered, as the library's handlers do. Anything else (data,
// close, a partial frame) is left to the library and reported false.
func (t *wsTransport) serveIdleControl(b []byte) bool {
	for rest := b; len(rest) > 0; {
		n := controlFrameLen(rest)
		if n == 0 {
			return false
		}
		rest = rest[n:]
	}
	for len(b) > 0 {
		n := controlFrameLen(b)
		op, key, payload := b[0]&0x0f, b[2:6], b[6:n]
		for i := range payload {
			payload[i] ^= key[i%4]
		}
		if op == websocket.PongMessage {
			_ = t.ponged()
		} else {
			// As the library's default ping handler: a failed pong is
			// not an error here (the socket's next read reports it).
			_ = t.ws.WriteControl(websocket.PongMessage, payload, time.Now().Add(t.timeout))
		}
		b = b[n:]
	}
	return true
}

// controlFrameLen is the length of the masked ping or pong frame b starts
// with (FIN set, no reserved bits, payload <= 125 bytes), 0 if b does not
// start with a complete one.
func controlFrameLen(b []byte) int {
	if len(b) < 6 || b[0]&0xf0 != 0x80 || b[1]&0x80 == 0 {
		return 0
	}
	if op := b[0] & 0x0f; op != websocket.PingMessage && op != websocket.PongMessage {
		return 0
	}
	size := int(b[1] & 0x7f)
	if size > 125 || len(b) < 6+size {
		return 0
	}
	return 6 + size
}
