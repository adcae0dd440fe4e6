package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
)

// Handler serves one connection's inbound messages.
//
// Concurrency: the requests and notifications of one connection are handled
// strictly in arrival order, one at a time, on that connection's reader
// goroutine (MAP needs per-sender ordering for map/send). Different
// connections are handled concurrently. A handler that must wait a long time
// should defer its reply (Defer) and answer later with Deferred.Reply; while
// it blocks, the connection reads nothing (including responses to Calls on
// it: see ErrCallInHandler).
type Handler interface {
	// Handle serves one request or notification. For a notification the
	// result and error are ignored (a failure is only logged). Return an
	// *Error to send exactly that error; any other error becomes -32603
	// with a generic message (the real error is logged). A panic is
	// recovered, logged with its stack, and answered with -32603; the
	// connection keeps working. ctx is cancelled when the connection closes.
	// A json.RawMessage result is sent as is (it must be valid JSON).
	Handle(ctx context.Context, c *Conn, req *Request) (result any, err error)

	// Closed is called exactly once, after the connection has ended and its
	// writer has stopped, on the connection's reader goroutine. Done() is
	// closed after Closed returns.
	Closed(c *Conn)
}

// Conn is one connected peer: a WebSocket, a stdio pipe or an in-process
// pipe. It is both a JSON-RPC server (its Handler answers the peer) and a
// client (Call, Notify). All methods are safe for concurrent use.
//
// Goroutines: a reader (which also runs the Handler) and, only while there
// is something to write, a writer that drains the send queue. Both end when
// the connection closes; Done is closed when they have.
type Conn struct {
	id     string
	kind   string
	remote string
	cfg    *Config // shared with the Server (or Dial's copy); never changed
	h      Handler
	log    atomic.Pointer[slog.Logger] // see logger
	obs    Observer
	obsOn  bool
	// keepalive: a WebSocket, pinged on the keepalives schedule (ping).
	// Beside obsOn so the two bools share a word.
	keepalive bool
	tr        transport
	// writerStarts counts writer goroutines started (tests: a lone
	// request or reply is written inline, without one).
	writerStarts atomic.Int64
	q            *sendQueue

	// ctx is cancelled when the connection starts closing and is what
	// Handle receives (with the handlerCtxKey marker): connctx.go.
	ctx connCtx

	// mu guards the close state below. Lock order: mu, then q.mu / pmu
	// (never held together in practice).
	mu          sync.Mutex
	handling    bool // the reader is inside a frame's handlers
	closeReq    bool // Close was called; the close starts after the current frame's reply
	closing     bool // beginClose ran
	closeCode   int
	closeReason string

	// deferred counts replies deferred by handlers (Defer) and not sent
	// yet; a requested close waits for them. Guarded by mu. deferSlots
	// holds one token per outstanding deferral (cap Config.MaxDeferred;
	// made by the first Defer; MaxDeferred 0 disables deferral).
	deferred   int
	deferSlots chan struct{}

	// The request being served, for Defer: reader goroutine only.
	cur        *Request
	curInBatch bool
	// servedOne: the reader has served a frame before the current one, so
	// the peer sends repeatedly and the reader lingers (ReaderLinger).
	servedOne   bool
	curDeferred *Deferred
	curStart    time.Time // when its handler started (with an Observer only)

	// afterReply holds functions registered with AfterReply by the
	// handlers of the frame being served; the reader runs them once that
	// frame's replies are queued. Guarded by mu.
	afterReply []func()

	// Closed once each, and made by the first of closing and waiting
	// (lazyChan, under mu): an idle session holds none of them.
	// readExited: the read loop returned; writerDone: the writer's last
	// run ended; done: the connection is torn down (Done).
	readExited chan struct{}
	writerDone chan struct{}
	done       chan struct{}
	// goodbyeOut: the queued frames and the close frame were written
	// (CloseWithin waits for it).
	goodbyeOut chan struct{}

	nextID atomic.Uint64
	pmu    sync.Mutex
	// pending holds the calls this side made (made by the first Call:
	// a server's sessions rarely call their peer); ended refuses new
	// ones once the connection ended.
	pending map[uint64]chan callResult
	ended   bool

	vmu   sync.Mutex
	value any

	// pre is the pre-auth slot and timer (network transports), set before
	// run and dropped once released, so an authenticated session does not
	// hold the timer.
	pre atomic.Pointer[preAuth]

	methods map[string]string // interned method names; reader goroutine only
	spare   []*frame          // writer goroutine only
	// ping is the connection's place in keepalives, the process-wide
	// schedule of WebSocket keepalive pings (keepalive.go): no goroutine
	// and no timer of its own between pings. Armed by run (keepalive set:
	// WebSocket only), re-armed by the writer after each ping, disarmed at
	// teardown.
	ping pingEntry
}

type handlerCtxKey struct{}

func newConn(base context.Context, cfg *Config, tr transport, h Handler) *Conn {
	if h == nil {
		h = noHandler{}
	}
	c := &Conn{
		id:     ulid.Make().String(),
		kind:   tr.kind(),
		remote: tr.remoteAddr(),
		cfg:    cfg,
		h:      h,
		obs:    cfg.Observer,
		obsOn:  cfg.Observer != nil,
		tr:     tr,
		q:      newSendQueue(cfg.SendQueueLen, cfg.SendQueueBytes, cfg.NotifyQueueBytes),
	}
	c.q.startWriter = func() { // owned by run: it waits on writerDone
		c.writerStarts.Add(1)
		go c.writeLoop()
	}
	c.keepalive = c.kind == kindWebSocket
	if !c.obsOn {
		c.obs = nopObserver{}
	}
	c.ctx.init(base, c)
	return c
}

// logger returns the connection's logger, built on first use: most
// connections never log, and a logger with these attributes costs a few
// hundred bytes that an idle session would hold for nothing.
func (c *Conn) logger() *slog.Logger {
	if l := c.log.Load(); l != nil {
		return l
	}
	l := discardLogger(c.cfg.Logger).With("component", "rpc", "conn_id", c.id, "transport", c.kind, "peer", c.remote)
	c.log.CompareAndSwap(nil, l)
	return c.log.Load()
}

// debug logs at debug level without building the logger when that level
// is off (it is called for every connection opened and closed).
func (c *Conn) debug(msg string, args ...any) {
	if c.cfg.Logger != nil && c.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		c.logger().Debug(msg, args...)
	}
}

// ID returns the connection's process-unique id (a ULID).
func (c *Conn) ID() string { return c.id }

// Transport returns "websocket", "stdio" or "inprocess".
func (c *Conn) Transport() string { return c.kind }

// RemoteAddr returns the peer's network address, or a descriptive name for
// pipes.
func (c *Conn) RemoteAddr() string { return c.remote }

// SetValue stores the handler's per-connection session state.
func (c *Conn) SetValue(v any) {
	c.vmu.Lock()
	c.value = v
	c.vmu.Unlock()
}

// Value returns what SetValue stored, or nil.
func (c *Conn) Value() any {
	c.vmu.Lock()
	defer c.vmu.Unlock()
	return c.value
}

// Done is closed when the connection has ended, its goroutines have exited
// and Handler.Closed has returned.
func (c *Conn) Done() <-chan struct{} { return c.lazyChan(&c.done) }

// lazyChan returns *ch, making it first if nobody has: one of the
// connection's close signals (readExited, writerDone, done).
func (c *Conn) lazyChan(ch *chan struct{}) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// closeLazy closes one of the close signals (once per signal).
func (c *Conn) closeLazy(ch *chan struct{}) { close(c.lazyChan(ch)) }

// Notify queues a notification for the peer and returns at once. It fails
// with ErrClosed after the connection closed and with ErrSlowConsumer when
// the send queue is full (the notification is dropped). params must encode
// to a JSON object (or be nil).
func (c *Conn) Notify(method string, params any) error {
	f := getFrame()
	if err := encodeCall(f, nil, method, params); err != nil {
		putFrame(f)
		return err
	}
	return c.enqueueNow(f)
}

// NotifyRaw is Notify for params that are already a JSON object (or nil).
// params is copied, not re-validated: pass bytes that came from a decoded
// frame or from encoding/json. This is the fan-out path: encode once, send
// to many connections.
func (c *Conn) NotifyRaw(method string, params json.RawMessage) error {
	if err := checkRawParams(params); err != nil {
		return err
	}
	f := getFrame()
	encodeRequest(f, nil, method, params)
	return c.enqueueNow(f)
}

func (c *Conn) enqueueNow(f *frame) error {
	if err := c.q.tryPut(f); err != nil {
		putFrame(f)
		return err
	}
	return nil
}

// Close starts a clean close with WebSocket status 1000 and the given
// reason, and returns without waiting; use Done to wait. If the reader is
// inside a handler (for example Close was called from Handle, as
// map/disconnect does), that request's reply is still sent first. Returns
// ErrClosed if the connection was already closing.
func (c *Conn) Close(reason string) error { return c.closeWith(closeNormal, reason) }

// CloseWithin is Close for a peer that may have stopped reading (a
// foreign server that froze): the frames queued before it and the close
// frame get grace to go out, and if they have not, the socket is cut
// (federation/connclose) instead of waiting WriteTimeout for them. Once
// the close frame is out, the peer's answer is awaited CloseGracePeriod,
// as Close does. It returns when the connection has ended (Done).
func (c *Conn) CloseWithin(reason string, grace time.Duration) error {
	err := c.Close(reason)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.lazyChan(&c.goodbyeOut):
	case <-c.Done():
		return err
	case <-t.C:
		c.debug("close frame not out within the grace: cutting the connection", "grace", grace)
		c.abort()
	}
	<-c.Done()
	return err
}

func (c *Conn) closeWith(code int, reason string) error {
	if len(reason) > maxReasonLength {
		reason = reason[:maxReasonLength]
	}
	c.mu.Lock()
	if c.closeReq {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closeReq, c.closeCode, c.closeReason = true, code, reason
	busy := c.handling || c.deferred > 0
	c.mu.Unlock()
	c.ctx.cancel() // a handler blocked on ctx returns, so its reply can go out
	if !busy {
		c.beginClose(code, reason)
	}
	return nil
}

// beginClose stops accepting frames and tells the writer to flush, say
// goodbye and tear the transport down. Idempotent.
func (c *Conn) beginClose(code int, reason string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	if !c.closeReq {
		c.closeReq, c.closeCode, c.closeReason = true, code, reason
	}
	c.mu.Unlock()
	c.ctx.cancel()
	c.q.close()
}

// abort closes without the goodbye: used when Shutdown's context expired
// and by CloseWithin.
func (c *Conn) abort() {
	c.beginClose(closeGoingAway, "server shutting down")
	_ = c.tr.close()
}

func (c *Conn) closeState() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeCode, c.closeReason
}

// setHandling marks the reader as inside (or outside) a frame's handlers.
// Leaving reports whether a Close arrived meanwhile and nothing deferred is
// outstanding (else the last deferred reply starts the close).
func (c *Conn) setHandling(v bool) (closeRequested bool) {
	c.mu.Lock()
	c.handling = v
	closeRequested = c.closeReq && !c.closing && c.deferred == 0
	c.mu.Unlock()
	return closeRequested
}

// closeRequested reports whether Close was called: the reader serves no
// further frames, even while the close itself waits for deferred replies.
func (c *Conn) closeRequested() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeReq
}

// noHandler serves connections dialled without a Handler: requests get
// -32601, notifications are dropped.
type noHandler struct{}

func (noHandler) Handle(_ context.Context, _ *Conn, req *Request) (any, error) {
	return nil, NewError(CodeMethodNotFound, fmt.Sprintf("Method not found: %s", req.Method))
}
func (noHandler) Closed(*Conn) {}
