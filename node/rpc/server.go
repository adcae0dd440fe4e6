package rpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"
)

// Server accepts MAP connections on any transport and serves each with the
// same Handler. It owns every connection goroutine it starts; Shutdown
// waits for all of them.
type Server struct {
	cfg Config
	h   Handler
	log *slog.Logger
	up  websocket.Upgrader

	baseCtx context.Context // parent of every connection's context
	cancel  context.CancelFunc

	mu       sync.Mutex
	closed   bool
	draining bool // Drain was called: new connections are refused
	conns    map[*Conn]struct{}
	wg       sync.WaitGroup // one per running connection (its reader goroutine)
	pre      *preAuthGate   // WebSockets and HTTP sessions not authenticated yet
}

// NewServer validates cfg and returns a Server that dispatches to h.
func NewServer(cfg Config, h Handler) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil Handler", ErrInvalidConfig)
	}
	s := &Server{cfg: cfg, h: h, conns: make(map[*Conn]struct{}),
		pre: newPreAuthGate(cfg.MaxPreAuthConns, cfg.MaxPreAuthConnsPerIP)}
	s.log = discardLogger(cfg.Logger).With("component", "rpc")
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.up = websocket.Upgrader{
		HandshakeTimeout: cfg.HandshakeTimeout,
		// ReadBufferSize 0: the library reads through net/http's own 4 KiB
		// bufio.Reader from the hijacked connection instead of allocating
		// another 16 KiB per connection (ws.go).
		WriteBufferSize: wsWriteBufferSize,
		WriteBufferPool: wsWriteBufferPool,
		CheckOrigin:     cfg.CheckOrigin,
	}
	if s.up.CheckOrigin == nil {
		s.up.CheckOrigin = func(*http.Request) bool { return true }
	}
	return s, nil
}

// ServeHTTP upgrades the request to a WebSocket (mount it at /map), serves
// its first message and returns; the connection is then served on a
// goroutine of its own, owned by the Server (Shutdown ends and waits for
// it). Returning frees what net/http
// keeps for the request while its handler runs (its 4 KiB write buffer, the
// request, the response and a deep goroutine stack), which an idle session
// would otherwise hold for its whole life. After Shutdown began it answers
// 503.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.Draining() {
		refuseDraining(w)
		return
	}
	if !s.acquire() {
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	growStack()
	ip := clientIP(r.RemoteAddr)
	if status, ok := s.pre.acquire(ip); !ok {
		s.wg.Done()
		s.log.Debug("websocket refused: pre-auth limit", "peer", r.RemoteAddr, "status", status)
		refusePreAuth(w, status)
		return
	}
	hc := &hijackCorker{ResponseWriter: w, timeout: s.cfg.WriteTimeout}
	ws, err := s.up.Upgrade(hc, r, nil)
	if err != nil {
		s.wg.Done()
		s.pre.release(ip)
		// The upgrader already answered with an HTTP error.
		s.log.Debug("websocket upgrade failed", "peer", r.RemoteAddr, "err", err)
		return
	}
	tr := newWSTransport(ws, hc.cork, s.cfg, true)
	if hc.br != nil && hc.br.Size() > 256 {
		tr.br = hc.br // the library reuses net/http's reader when it is over 256 bytes
	}
	// Not derived from baseCtx: Shutdown closes (and so cancels) every
	// registered connection itself, and a child of a shared context costs
	// each of thousands of idle sessions an entry in its children map.
	c := newConn(context.Background(), &s.cfg, tr, s.h)
	c.startPreAuth(s.pre, ip, s.cfg.PreAuthTimeout)
	if !s.register(c) {
		go func() { // Shutdown started between acquire and here: it did not see c
			defer s.wg.Done()
			_ = c.run()
		}()
		return
	}
	// The first message (map/connect, usually) is served here, on a stack
	// the handshake and the handlers above already grew, rather than on a
	// new goroutine that would grow its own again through the call's
	// depth (map/connect → forward → gRPC): 12% of a follower's CPU under
	// a burst of plaintext connects. The reader then hops to a small
	// goroutine (runDetached), and this handler returns.
	c.runDetached(func(error) { // Shutdown waits for this through wg
		s.unregister(c)
		s.wg.Done()
	})
}

// ServeStdio serves one NDJSON connection on r (inbound lines) and w
// (outbound lines), e.g. a subprocess agent's stdout and stdin. It returns
// when the peer closes its side (nil), the connection is closed, Shutdown
// runs, or ctx is done. r and w are closed at the end if they implement
// io.Closer; that is also how a pending Read is interrupted, so a reader
// that cannot be closed keeps ServeStdio waiting until it returns.
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	if !s.acquire() {
		return ErrServerClosed
	}
	defer s.wg.Done()
	c := newConn(s.baseCtx, &s.cfg, newStreamTransport(kindStdio, "stdio", r, w, s.cfg.MaxFrameBytes), s.h)
	stop := context.AfterFunc(ctx, func() { _ = c.closeWith(closeGoingAway, "context done") })
	defer stop()
	return s.serve(c)
}

// ServeConn connects an in-process peer: it returns the peer's end of a
// pipe whose other end this Server serves. h handles what the server sends
// to the peer (nil: notifications are dropped, requests get -32601). Close
// the returned Conn (and wait on Done) to disconnect; Shutdown also ends it.
func (s *Server) ServeConn(ctx context.Context, h Handler) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !s.acquire() {
		return nil, ErrServerClosed
	}
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	srv := newConn(s.baseCtx, &s.cfg, newStreamTransport(kindInProcess, "inprocess", c2sR, s2cW, s.cfg.MaxFrameBytes), s.h)
	cli := newConn(context.Background(), &s.cfg, newStreamTransport(kindInProcess, "inprocess", s2cR, c2sW, s.cfg.MaxFrameBytes), h)
	go func() {
		defer s.wg.Done()
		_ = s.serve(srv)
	}()
	go func() { _ = cli.run() }() // owned by cli: Close + Done
	return cli, nil
}

// acquire registers a connection about to start, unless shutting down. The
// check and wg.Add share the lock with Shutdown so no Add follows its Wait.
func (s *Server) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Server) serve(c *Conn) error {
	s.register(c)
	err := c.run()
	s.unregister(c)
	return err
}

// register adds c to the connections Shutdown closes. If Shutdown started
// between acquire and here (it did not see c), c is told to close instead
// and register reports false.
func (s *Server) register(c *Conn) bool {
	s.mu.Lock()
	if s.closed || s.draining {
		draining := s.draining && !s.closed
		s.mu.Unlock()
		if draining {
			_ = c.closeWith(closeRestart, "node draining: reconnect to another node")
		} else {
			_ = c.closeWith(closeGoingAway, "server shutting down")
		}
		return false
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return true
}

// unregister forgets c once it has ended.
func (s *Server) unregister(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown closes every connection with 1001 "going away" (each flushes
// what it has queued and finishes its current request first) and waits for
// all connection goroutines. A connection whose goodbye (its queued frames
// and the close frame) has not gone out shutdownGoodbyeGrace after its
// close began is cut: its client stopped reading (shutdown.go). When ctx ends first, connections are torn down
// hard and ctx.Err() is returned. New connections are refused from the
// start. Idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	for _, c := range s.connsAfter(func() { s.closed = true }) {
		_ = c.closeWith(closeGoingAway, "server shutting down")
	}
	allDone := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(allDone)
	}()
	if s.awaitGoodbyes(ctx, allDone) {
		s.cancel()
		return nil
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	return ctx.Err()
}

// connsAfter runs set (which flips a state flag) under the lock and
// returns the connections live at that moment: any later one sees the flag
// in register.
func (s *Server) connsAfter(set func()) []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	set()
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// NumConns returns the number of live connections (for metrics and tests).
func (s *Server) NumConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
