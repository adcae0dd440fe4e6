package rpc

import (
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The HTTP+SSE transport (map-protocol.md §2.2 sketches the endpoints and
// leaves sessions undefined). Our design:
//
//   - An HTTP session is one Conn, so the MAP layer cannot tell it from a
//     WebSocket: map/connect, subscriptions, resume and the disconnect
//     policy work unchanged. The first POST (or event-stream GET) without a
//     MAP-Session header creates one; every response carries the header.
//     The session id is a 128-bit random capability, distinct from the MAP
//     sessionId that map/connect returns.
//   - POST /map/rpc takes one JSON-RPC object, POST /map/batch one array.
//     The body is handed to the Conn's reader as one frame, so decoding and
//     dispatch are the WebSocket path's. The responses to the body's own
//     requests (matched by id) are the HTTP response body; everything else
//     the connection sends (notifications, server-to-client requests, late
//     responses) goes to the event stream. A body of notifications or
//     responses only is answered 202 with no body.
//   - GET /map/events is the session's SSE stream: every message is
//     "id: <seq>", "event: map.event", "data: <one JSON-RPC message>". A
//     session has at most one stream; a new GET replaces the old one. The
//     last events are kept (SSEConfig.BufferEvents) so a client that
//     reconnects with Last-Event-ID gets what it missed, or a map.gap event
//     naming the sequence numbers that were dropped.
//   - DELETE /map/session ends a session at once, as closing a WebSocket
//     does (map/disconnect ends the MAP session, not the connection).
//   - A session with no POST in flight and no stream for
//     SSEConfig.IdleTimeout is closed like a dropped WebSocket.

// Header and event names of the HTTP+SSE transport (wire facts).
const (
	// SessionHeader carries the HTTP session id on requests and responses.
	SessionHeader = "MAP-Session"
	// sseEventName is the SSE event name of every JSON-RPC message.
	sseEventName = "map.event"
	// sseGapEvent reports event sequence numbers the client cannot get.
	sseGapEvent = "map.gap"
	// sseSessionEvent opens a stream that created its session, so a
	// browser EventSource (which cannot read headers) learns the id.
	sseSessionEvent = "map.session"
	// sseCloseEvent is the last event of a session that ended.
	sseCloseEvent = "map.close"

	kindHTTPSSE = "http-sse"
)

// sseHandler serves one Server's HTTP+SSE endpoints. It owns no goroutine
// of its own: each session's reader runs under the Server's WaitGroup
// (Shutdown waits for it), streams and POSTs run on net/http's goroutines.
type sseHandler struct {
	srv *Server
	cfg SSEConfig
	log *slog.Logger
	mux *http.ServeMux

	mu       sync.Mutex
	sessions map[string]*httpSession
	perIP    map[string]int        // sessions by client IP
	hooked   map[*http.Server]bool // servers whose Shutdown ends our streams
}

// HTTPSSEHandler returns the HTTP+SSE transport for this Server: POST
// /map/rpc, POST /map/batch, GET /map/events and DELETE /map/session (mount
// it so it sees those paths, e.g. at "/map/"). Sessions it creates are connections of s: they
// count in NumConns and Shutdown closes them. Safe for concurrent use; call
// it once per mount (each handler has its own sessions).
func (s *Server) HTTPSSEHandler(cfg SSEConfig) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &sseHandler{
		srv:      s,
		cfg:      cfg,
		log:      s.log.With("transport", kindHTTPSSE),
		sessions: make(map[string]*httpSession),
		perIP:    make(map[string]int),
		hooked:   make(map[*http.Server]bool),
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("POST /map/rpc", func(w http.ResponseWriter, r *http.Request) { h.servePost(w, r, false) })
	h.mux.HandleFunc("POST /map/batch", func(w http.ResponseWriter, r *http.Request) { h.servePost(w, r, true) })
	h.mux.HandleFunc("GET /map/events", h.serveEvents)
	h.mux.HandleFunc("DELETE /map/session", h.serveDelete)
	return h, nil
}

// MustHTTPSSEHandler is HTTPSSEHandler for a config known to be valid (such
// as DefaultSSEConfig()); it panics otherwise.
func (s *Server) MustHTTPSSEHandler(cfg SSEConfig) http.Handler {
	h, err := s.HTTPSSEHandler(cfg)
	if err != nil {
		panic(err)
	}
	return h
}

func (h *sseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.hookShutdown(r)
	h.mux.ServeHTTP(w, r)
}

// hookShutdown makes the serving http.Server's Shutdown end our event
// streams. http.Server.Shutdown waits for active requests, and an SSE
// stream is one that never ends on its own: without this hook the node's
// shutdown would stall until its deadline before the rpc Server (which
// closes the sessions) even ran.
func (h *sseHandler) hookShutdown(r *http.Request) {
	hs, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.hooked[hs] {
		h.hooked[hs] = true
		hs.RegisterOnShutdown(h.endStreams)
	}
}

// endStreams detaches every event stream; the sessions stay open.
func (h *sseHandler) endStreams() {
	h.mu.Lock()
	list := make([]*httpSession, 0, len(h.sessions))
	for _, s := range h.sessions {
		list = append(list, s)
	}
	h.mu.Unlock()
	for _, s := range list {
		s.detachAll()
	}
}

// serveDelete closes the named session (status 1000, like a client's
// WebSocket close); its stream gets map.close and ends. 204 on success.
func (h *sseHandler) serveDelete(w http.ResponseWriter, r *http.Request) {
	sess, status, serr := h.sessionFor(r, false)
	if serr != nil {
		writeRPC(w, status, nil, nil, serr)
		return
	}
	defer sess.end()
	_ = sess.conn.Close("http session deleted")
	w.WriteHeader(http.StatusNoContent)
}

// lookup finds the session named by the request, if any.
func (h *sseHandler) lookup(id string) *httpSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

// create starts a new session (a Conn served under the Server's
// WaitGroup). The session starts with one activity (the caller's request)
// so it cannot expire before the caller has used it.
func (h *sseHandler) create(r *http.Request) (*httpSession, int, *Error) {
	if !h.srv.acquire() {
		return nil, http.StatusServiceUnavailable, NewError(CodeInternal, "Server shutting down")
	}
	ip := clientIP(r.RemoteAddr)
	if status, ok := h.srv.pre.acquire(ip); !ok {
		h.srv.wg.Done()
		return nil, status, NewError(CodeExhausted, "Too many unauthenticated connections").WithRetryAfter(time.Second)
	}
	h.mu.Lock()
	if len(h.sessions) >= h.cfg.MaxSessions || h.perIP[ip] >= h.cfg.MaxSessionsPerIP {
		h.mu.Unlock()
		h.srv.pre.release(ip)
		h.srv.wg.Done()
		return nil, http.StatusServiceUnavailable, NewError(CodeExhausted, "Too many HTTP sessions").WithRetryAfter(time.Second)
	}
	sess := newHTTPSession(h, newSessionID(), r.RemoteAddr)
	sess.ip = ip
	sess.conn = newConn(h.srv.baseCtx, &h.srv.cfg, sess, h.srv.h)
	sess.conn.startPreAuth(h.srv.pre, ip, h.srv.cfg.PreAuthTimeout)
	h.sessions[sess.id] = sess
	h.perIP[ip]++
	h.mu.Unlock()
	go func() {
		defer h.srv.wg.Done()
		_ = h.srv.serve(sess.conn)
	}()
	h.log.Debug("http session opened", "conn_id", sess.conn.ID(), "peer", r.RemoteAddr)
	return sess, 0, nil
}

// remove forgets a session that closed.
func (h *sseHandler) remove(s *httpSession) {
	h.mu.Lock()
	if h.sessions[s.id] == s {
		delete(h.sessions, s.id)
		if h.perIP[s.ip]--; h.perIP[s.ip] <= 0 {
			delete(h.perIP, s.ip)
		}
	}
	h.mu.Unlock()
}

// numSessions is for tests.
func (h *sseHandler) numSessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// newSessionID returns 128 random bits, URL-safe: the id is the only thing
// that lets an HTTP request act on a session.
func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sessionNotFound is the answer to an unknown, expired or closed session.
func sessionNotFound() *Error {
	return NewError(CodeInvalidRequest, "Unknown or expired HTTP session").
		WithDetails(map[string]any{"header": SessionHeader})
}

// writeRPC answers with a JSON body (a response, an array of them, or an
// error response built from e when body is nil).
func writeRPC(w http.ResponseWriter, status int, body []byte, id []byte, e *Error) {
	if body == nil {
		body, _ = appendResponse(nil, id, nil, e)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// rejected tells the Observer about a frame answered with a protocol error
// ("too_large", "parse", "invalid_request", as on WebSocket).
func (h *sseHandler) rejected(reason string) {
	if h.srv.cfg.Observer != nil {
		h.srv.cfg.Observer.FrameRejected(reason)
	}
}
