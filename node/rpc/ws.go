package rpc

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/federation/connclose"
)

const (
	kindWebSocket = "websocket"
	kindStdio     = "stdio"
	kindInProcess = "inprocess"

	wsReadBufferSize  = 16 << 10
	wsWriteBufferSize = 16 << 10
	// readBufKeep is the largest read buffer kept between messages; bigger
	// ones (for rare large payloads) are dropped after use.
	readBufKeep = 64 << 10
	// closeEchoTimeout is the library's deadline for echoing a close frame.
	closeEchoTimeout = time.Second
)

// wsWriteBufferPool shares write buffers between idle connections.
var wsWriteBufferPool websocket.BufferPool = newSyncBufferPool()

// wsTransport is a gorilla/websocket connection over a corkConn.
type wsTransport struct {
	ws       *websocket.Conn
	cork     *corkConn
	maxFrame int64
	timeout  time.Duration
	buf      []byte // reader goroutine only
	pongWait time.Duration
	// server: the accepting side, whose corkConn sits above TLS (on the
	// hijacked connection); its data frames are framed here (wsframe.go).
	server bool

	wsIdleState // server side: see wsidle.go
}

func newWSTransport(ws *websocket.Conn, cork *corkConn, cfg Config, server bool) *wsTransport {
	t := &wsTransport{ws: ws, cork: cork, maxFrame: cfg.MaxFrameBytes, timeout: cfg.WriteTimeout, server: server}
	// The library's own limit stays off: we enforce MaxFrameBytes while
	// reading so an oversized message can be answered instead of killing
	// the connection (its default would be to close with 1009).
	ws.SetReadLimit(0)
	t.pongWait = cfg.PingInterval + cfg.PongTimeout
	_ = t.ponged()
	ws.SetPongHandler(func(string) error { return t.ponged() })
	// The library's default close handler (echo the close code), plus the
	// mark that stops data frames, which bypass the library (wsframe.go),
	// from following the echoed close frame.
	ws.SetCloseHandler(func(code int, _ string) error {
		cork.markCloseSent()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(closeEchoTimeout))
		return nil
	})
	return t
}

// ponged extends the read deadline: the peer answered a keepalive.
func (t *wsTransport) ponged() error {
	t.readDeadline = time.Now().Add(t.pongWait)
	return t.cork.Conn.SetReadDeadline(t.readDeadline)
}

func (t *wsTransport) kind() string       { return kindWebSocket }
func (t *wsTransport) remoteAddr() string { return t.ws.RemoteAddr().String() }

// readMessage reads one WebSocket message (text or binary, fragments
// joined) of at most maxFrame bytes into a fresh buffer.
func (t *wsTransport) readMessage() ([]byte, error) {
	_, r, err := t.ws.NextReader()
	if err != nil {
		return nil, err
	}
	buf, err := readLimited(r, t.buf[:0], t.maxFrame)
	if cap(buf) <= readBufKeep {
		t.buf = buf
	} else {
		t.buf = nil
	}
	if err != nil {
		return nil, err
	}
	return bytes.Clone(buf), nil
}

// readLimited appends r's contents to buf. Past limit it keeps a prefix,
// discards the rest and returns a *tooLargeError.
func readLimited(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			tl := &tooLargeError{limit: limit, prefix: bytes.Clone(buf[:min(len(buf), idPrefixBytes)])}
			if _, err := io.Copy(io.Discard, r); err != nil {
				return buf[:0], err
			}
			return buf[:0], tl
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf[:0], err
		}
	}
}

func (t *wsTransport) writeMessages(frames []*frame) error {
	if t.server {
		return t.cork.writeTextFrames(frames)
	}
	// A client's frames are masked, and its corkConn may sit under TLS:
	// they go through the library.
	t.cork.cork()
	for _, f := range frames {
		if err := t.ws.WriteMessage(websocket.TextMessage, f.b); err != nil {
			_ = t.cork.uncork()
			return err
		}
	}
	return t.cork.uncork()
}

func (t *wsTransport) ping() error {
	return t.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(t.timeout))
}

func (t *wsTransport) sendClose(code int, reason string) error {
	t.cork.markCloseSent()
	return t.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(t.timeout))
}

// close closes the connection promptly whatever the peer does. On a
// client, TLS sits above the corkConn and its close_notify goes through
// the corkConn's own write deadline (WriteTimeout); connclose cuts the
// socket under it after a grace. A server's corkConn is above TLS and
// closes so itself.
func (t *wsTransport) close() error { return connclose.Close(t.ws.NetConn(), connclose.Grace) }

// hijackCorker wraps the ResponseWriter given to the upgrader so that the
// hijacked socket is a corkConn.
type hijackCorker struct {
	http.ResponseWriter
	timeout time.Duration
	cork    *corkConn
	br      *bufio.Reader // net/http's reader, which the library reads through
}

func (h *hijackCorker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.cork = newCorkConn(nc, h.timeout)
	brw.Writer.Reset(h.cork)
	h.br = brw.Reader
	return h.cork, brw, nil
}

func (h *hijackCorker) Unwrap() http.ResponseWriter { return h.ResponseWriter }
