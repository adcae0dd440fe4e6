package rpc

import "net/http"

// CloseReconnect is the WebSocket close code Drain uses (RFC 6455 1012,
// "service restart"): the client should reconnect, to another node.
const CloseReconnect = closeRestart

// Drain stops the Server taking new connections (a WebSocket upgrade or a
// new HTTP+SSE session answers 503 with Retry-After) and asks every live
// one to go elsewhere: it queues the notification method(params) (the
// reconnect hint) and then closes the connection with CloseReconnect and
// reason, after its current request and what it has queued. It returns the
// number of connections asked, and does not wait for them to end
// (NumConns falls to 0 as they do). Shutdown still ends the Server.
func (s *Server) Drain(method string, params any, reason string) int {
	conns := s.connsAfter(func() { s.draining = true })
	for _, c := range conns {
		// A full queue drops the hint; the close still tells the client
		// to reconnect, and any node can resume its session.
		_ = c.Notify(method, params)
		_ = c.closeWith(closeRestart, reason)
	}
	return len(conns)
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// refuseDraining answers a new connection of a draining Server.
func refuseDraining(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "node draining: connect to another node", http.StatusServiceUnavailable)
}

// CloseToReconnect closes one connection as Drain does (CloseReconnect,
// after its current request and what it has queued), without a hint
// notification: the client reconnects and resumes its session, on this
// node or another. Returns ErrClosed if the connection was already closing.
func (c *Conn) CloseToReconnect(reason string) error { return c.closeWith(closeRestart, reason) }
