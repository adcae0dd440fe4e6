package node

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"runtime"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/concordmap/concord/node/rpc"
)

// httpHandler builds the node's HTTP mux. The MAP WebSocket endpoint and the
// operational endpoints share one port so a newcomer has one address to
// remember; start wraps it in the authorizer (httpClass: /debug needs an
// operator credential). /debug/pprof exists only with Config.EnableDebug.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	origins := s.mapOriginCheck()
	mux.Handle("/map", origins(s.gateUntilCaughtUp(s.rpc)))
	mux.Handle("/map/", origins(s.gateUntilCaughtUp(s.rpc.MustHTTPSSEHandler(rpc.DefaultSSEConfig()))))
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("GET /v1/ready", s.handleReady)
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("GET /v1/operator/health", s.handleOperatorHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	if s.cfg.EnableDebug {
		mux.Handle(debugPrefix, debugHandler())
	}
	s.routeConsole(mux)
	return s.allowMemberOrigins(mux)
}

// debugPrefix is where the debug handlers live; nothing under it is served
// unless Config.EnableDebug is set.
const debugPrefix = "/debug/"

// debugHandler serves Go's profiling endpoints under /debug/pprof/. It is
// an admin surface (profiles, symbols, the command line), mounted only with
// Config.EnableDebug, as one handler so an authorization wrapper can guard
// all of it in one place.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(debugPrefix+"pprof/", pprof.Index)
	mux.HandleFunc(debugPrefix+"pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc(debugPrefix+"pprof/profile", pprof.Profile)
	mux.HandleFunc(debugPrefix+"pprof/symbol", pprof.Symbol)
	mux.HandleFunc(debugPrefix+"pprof/trace", pprof.Trace)
	return mux
}

// handleHealth answers 200 while the process serves HTTP at all (liveness).
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"status":   "ok",
		"nodeId":   s.cfg.NodeID,
		"systemId": s.cfg.SystemID,
		"version":  s.cfg.Version,
		"tls":      s.tls != nil,
	})
}

// handleReady answers 200 while the node serves consistent state (see
// readyReason), else 503 with the reason.
func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if reason := s.readyReason(); reason != "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}

// handleStatus reports this node's Raft view for operators and the CLI,
// with the process's resident memory and goroutine count (what `concord
// bench sessions` reads to work out the cost of a session).
func (s *Server) handleStatus(w http.ResponseWriter, _ *http.Request) {
	leaderID, leaderAddr := s.store.Leader()
	writeJSON(w, http.StatusOK, map[string]any{
		"nodeId":     s.cfg.NodeID,
		"systemId":   s.cfg.SystemID,
		"version":    s.cfg.Version,
		"leaderId":   leaderID,
		"leaderAddr": leaderAddr,
		"raft":       s.store.Stats(),
		"rssBytes":   s.metrics.residentBytes(),
		"goroutines": runtime.NumGoroutine(),
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// gateUntilCaughtUp answers 503 with Retry-After, before any WebSocket
// upgrade, while the node is still catching up after a start (clients retry
// or pick another node instead of reading state this node has not
// replayed) and while it is being drained.
func (s *Server) gateUntilCaughtUp(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.caughtUp.Load() || s.draining.Load() {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": s.readyReason()})
			return
		}
		next.ServeHTTP(w, r)
	})
}
