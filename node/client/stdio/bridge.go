package stdio

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/concordmap/concord/node/rpc"
)

// Bridge relays a subprocess agent's MAP NDJSON (map-protocol.md §2.2
// stdio: one JSON-RPC message per line on stdin/stdout) to a node's
// WebSocket endpoint: each stdin line becomes one text frame, each frame
// from the node one stdout line. It does not speak MAP except in three
// places: lines the node would refuse as too large or unparsable are
// answered here (same bytes as the node's answer; the bridge keeps
// running), requests in flight when a connection drops are answered with a
// connection-lost error, and (Config.Resume) the subprocess's last
// map/connect is replayed with its sessionId and resumeToken on the next
// node, after which the subprocess gets an x-concord/stdio.reconnected
// notification telling it whether its session was restored.
type Bridge struct {
	cfg Config
	log *slog.Logger
	out *lineWriter
	trk tracker
}

// ReconnectedMethod is the notification a Bridge writes to stdout after it
// reconnected. Params: {server, resumed, reconnected, sessionId?, error?}.
// reconnected false means the subprocess has no MAP session any more and
// must send map/connect (and register and subscribe) again.
const ReconnectedMethod = "x-concord/stdio.reconnected"

// NewBridge validates cfg.
func NewBridge(cfg Config) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Bridge{cfg: cfg, log: cfg.logger().With("component", "stdio-bridge")}, nil
}

// errStdinDone ends a connection because the subprocess closed stdin.
var errStdinDone = errors.New("rpc: stdin closed")

// Run relays between in/out and the nodes until in ends (nil, after the
// responses in flight arrived or DrainTimeout), ctx is done (nil), or no
// node could be reached within ConnectTimeout/ReconnectTimeout (an error).
// It owns one stdin reader goroutine; if in is an io.Closer it is closed
// at the end so that goroutine can be waited for. Call Run once.
func (b *Bridge) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	b.out = &lineWriter{w: bufio.NewWriterSize(out, 64<<10)}
	lines := make(chan []byte, b.cfg.QueueLen)
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		b.readStdin(in, lines, stop)
	}()
	defer func() {
		close(stop)
		if c, ok := in.(io.Closer); ok {
			_ = c.Close()
			<-readerDone
		}
	}()
	return b.loop(ctx, lines)
}

// loop connects, serves one connection, and reconnects after a loss.
func (b *Bridge) loop(ctx context.Context, lines <-chan []byte) error {
	start, first := 0, true
	for {
		timeout := b.cfg.ReconnectTimeout
		if first {
			timeout = b.cfg.ConnectTimeout
		}
		up, idx, err := b.connect(ctx, start, timeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !first {
			err = b.resume(ctx, up)
		}
		first = false
		if err == nil {
			err = up.pump(ctx, lines)
		} else {
			_ = up.ws.Close()
		}
		if errors.Is(err, errStdinDone) || ctx.Err() != nil {
			return nil
		}
		b.log.Warn("connection to node lost, failing over", "peer", up.url, "err", err)
		b.trk.failAll(b.out)
		start = idx + 1
	}
}

// readStdin forwards stdin lines, answering the ones the node would refuse
// at the framing level. lines is closed when stdin ends.
func (b *Bridge) readStdin(in io.Reader, lines chan<- []byte, stop <-chan struct{}) {
	defer close(lines)
	lr := rpc.NewLineReader(in, b.cfg.MaxFrameBytes)
	for {
		msg, err := lr.Next()
		if resp, ok := rpc.TooLargeResponse(err); ok {
			b.out.line(resp)
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				b.log.Debug("stdin ended", "err", err)
			}
			return
		}
		// The node would answer these the same way; answering here keeps
		// garbage (e.g. invalid UTF-8, which a text frame must not carry)
		// off the socket.
		if resp, ok := rpc.ParseErrorResponse(msg); ok {
			b.out.line(resp)
			continue
		}
		select {
		case lines <- msg:
		case <-stop:
			return
		}
	}
}

// lineWriter writes whole lines to the subprocess from several goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// line writes b as one line (raw newlines, only possible as whitespace in
// JSON, are blanked) and flushes. Errors are ignored: a subprocess that
// closed its stdin gets nothing more, and the bridge ends when its stdout
// (our stdin) closes.
func (lw *lineWriter) line(b []byte) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for _, c := range b {
		if c == '\n' || c == '\r' {
			c = ' '
		}
		_ = lw.w.WriteByte(c)
	}
	_ = lw.w.WriteByte('\n')
	_ = lw.w.Flush()
}

func (lw *lineWriter) reply(id []byte, e *rpc.Error) {
	lw.line(rpc.ErrorResponse(id, e))
}

func (lw *lineWriter) notify(method string, params any) {
	if b, err := rpc.NotificationFrame(method, params); err == nil {
		lw.line(b)
	}
}

// tracker remembers the subprocess's requests in flight (to answer them if
// the connection drops) and its MAP session (to resume it).
type tracker struct {
	mu       sync.Mutex
	inflight map[string]trackedCall // raw JSON id -> call
	empty    chan struct{}          // closed when inflight becomes empty; nil if nobody waits
	session  *bridgeSession
}

type trackedCall struct {
	method string
	params []byte // map/connect only: replayed on resume
}

type bridgeSession struct {
	params      []byte // the subprocess's map/connect params
	sessionID   string
	resumeToken string
}

// sent records the requests in a frame about to go to the node.
func (t *tracker) sent(msg []byte) {
	envs, _ := rpc.Envelopes(msg)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range envs {
		if !m.IsRequest || m.ID == nil {
			continue
		}
		if t.inflight == nil {
			t.inflight = make(map[string]trackedCall)
		}
		call := trackedCall{method: m.Method}
		if call.method == "map/connect" {
			call.params = append([]byte(nil), m.Params...)
		}
		t.inflight[string(m.ID)] = call
	}
}

// received notes the responses in a frame from the node.
func (t *tracker) received(frame []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.inflight) == 0 {
		return // the hot path: notifications while nothing is pending
	}
	envs, _ := rpc.Envelopes(frame)
	for _, m := range envs {
		if !m.IsResponse || m.ID == nil {
			continue
		}
		call, ok := t.inflight[string(m.ID)]
		if !ok {
			continue
		}
		delete(t.inflight, string(m.ID))
		if m.Error == nil {
			t.sessionEventLocked(call, m.Result)
		}
	}
	if len(t.inflight) == 0 && t.empty != nil {
		close(t.empty)
		t.empty = nil
	}
}

// sessionEventLocked follows the subprocess's MAP session: a successful
// map/connect starts (or resumes) it, map/disconnect ends it.
func (t *tracker) sessionEventLocked(call trackedCall, result []byte) {
	switch call.method {
	case "map/connect":
		var r struct{ SessionID, ResumeToken string }
		if json.Unmarshal(result, &r) == nil && r.SessionID != "" {
			t.session = &bridgeSession{params: call.params, sessionID: r.SessionID, resumeToken: r.ResumeToken}
		}
	case "map/disconnect":
		t.session = nil
	}
}

// failAll answers every request in flight: its connection is gone, and
// whether the node applied it is unknown.
func (t *tracker) failAll(out *lineWriter) {
	t.mu.Lock()
	calls := t.inflight
	t.inflight = nil
	if t.empty != nil {
		close(t.empty)
		t.empty = nil
	}
	t.mu.Unlock()
	e := rpc.NewError(rpc.CodeInternal, "Connection to the MAP server lost; the request may or may not have been applied").
		WithDetails(map[string]any{"reason": "connection_lost"})
	for id := range calls {
		out.reply([]byte(id), e)
	}
}

// emptied returns a channel closed once nothing is in flight.
func (t *tracker) emptied() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.inflight) == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if t.empty == nil {
		t.empty = make(chan struct{})
	}
	return t.empty
}

func (t *tracker) current() *bridgeSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.session
}

func (t *tracker) setSession(s *bridgeSession) {
	t.mu.Lock()
	t.session = s
	t.mu.Unlock()
}
