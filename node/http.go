package node

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler builds the node's HTTP mux. The MAP WebSocket endpoint and the
// operational endpoints share one port so a newcomer has one address to
// remember; production deployments can firewall /debug separately.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/map", s.rpc)
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("GET /v1/ready", s.handleReady)
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// handleHealth answers 200 while the process serves HTTP at all (liveness).
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"status":   "ok",
		"nodeId":   s.cfg.NodeID,
		"systemId": s.cfg.SystemID,
		"version":  s.cfg.Version,
	})
}

// handleReady answers 200 once the node knows a leader and has applied
// everything it knows to be committed (readiness), else 503 with the reason.
func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if reason := s.notReadyReason(); reason != "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}

// handleStatus reports this node's Raft view for operators and the CLI.
func (s *Server) handleStatus(w http.ResponseWriter, _ *http.Request) {
	leaderID, leaderAddr := s.store.Leader()
	writeJSON(w, http.StatusOK, map[string]any{
		"nodeId":     s.cfg.NodeID,
		"systemId":   s.cfg.SystemID,
		"version":    s.cfg.Version,
		"leaderId":   leaderID,
		"leaderAddr": leaderAddr,
		"raft":       s.store.Stats(),
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
