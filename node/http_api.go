package node

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/console"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/runs"
)

// routeConsole adds the web console (/ui/) and the read-only /v1
// endpoints it reads besides MAP and /v1/status (README "Console"): gossip
// members, the Raft configuration, agent placement, federation links and
// a run's result files. They are ordinary /v1 endpoints, for scripts as much as for the
// console.
func (s *Server) routeConsole(mux *http.ServeMux) {
	mux.Handle("/ui/", console.Handler())
	mux.HandleFunc("GET /v1/members", s.handleMembers)
	mux.HandleFunc("GET /v1/raft/peers", s.handleRaftPeers)
	mux.HandleFunc("GET /v1/placement", s.handlePlacement)
	mux.HandleFunc("GET /v1/federation/links", s.handleFedLinks)
	mux.HandleFunc("GET /v1/runs/{id}/{file}", s.handleRunFile)
}

// memberJSON is one gossip member in GET /v1/members.
type memberJSON struct {
	ID       string `json:"id"`
	SystemID string `json:"systemId"`
	Status   string `json:"status"` // alive, left or dead
	Role     string `json:"role"`
	Version  string `json:"version"`
	// FSMLevel is the replicated-state behaviour the member's build
	// enforces (registry.FSMLevel; 0 from older versions).
	FSMLevel   int    `json:"fsmLevel"`
	HTTPAddr   string `json:"httpAddr"`
	GRPCAddr   string `json:"grpcAddr"`
	RaftAddr   string `json:"raftAddr"`
	GossipAddr string `json:"gossipAddr"`
}

// handleMembers lists the gossip members this node knows, itself included.
func (s *Server) handleMembers(w http.ResponseWriter, _ *http.Request) {
	ms := s.membership.Members()
	out := make([]memberJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberJSON{ID: m.ID, SystemID: m.SystemID, Status: m.Status.String(), Role: string(m.Role),
			Version: m.Version, FSMLevel: m.FSMLevel, HTTPAddr: m.HTTPAddr, GRPCAddr: m.GRPCAddr, RaftAddr: m.RaftAddr, GossipAddr: m.GossipAddr})
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": s.cfg.NodeID, "members": out})
}

// raftPeerJSON is one server of the Raft configuration in GET /v1/raft/peers.
type raftPeerJSON struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"` // voter or nonvoter
	Leader   bool   `json:"leader"`
}

// handleRaftPeers lists the Raft configuration as this node knows it,
// with the leader it follows.
func (s *Server) handleRaftPeers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	servers, err := s.store.Configuration(ctx)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "read raft configuration: " + err.Error()})
		return
	}
	leader, _ := s.store.Leader()
	out := make([]raftPeerJSON, 0, len(servers))
	for _, sv := range servers {
		p := raftPeerJSON{ID: sv.ID, Address: sv.Address, Suffrage: "nonvoter", Leader: sv.ID == leader}
		if sv.Voter {
			p.Suffrage = "voter"
		}
		out = append(out, p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": s.cfg.NodeID, "leaderId": leader, "peers": out})
}

// handleRunFile serves argue's result files of a run from this node's
// replica, written by the same consensus writers `concord argue` uses:
// result.json (finished runs), events.jsonl (the events so far) and
// summary.md (runs that are over). A run still in progress has no
// result.json or summary.md yet: 409.
func (s *Server) handleRunFile(w http.ResponseWriter, r *http.Request) {
	f, ok := s.runs.Files(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "run not found"})
		return
	}
	var b bytes.Buffer
	var ctype string
	switch r.PathValue("file") {
	case "result.json":
		if f.Result == nil {
			writeJSON(w, http.StatusConflict, map[string]any{"error": "run has no result", "status": f.Status})
			return
		}
		ctype = "application/json"
		if err := consensus.WriteResultJSON(&b, f.Result); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "write result.json: " + err.Error()})
			return
		}
	case "events.jsonl":
		ctype = "application/x-ndjson"
		if err := consensus.WriteEventsJSONL(&b, f.Events); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "write events.jsonl: " + err.Error()})
			return
		}
	case "summary.md":
		switch {
		case f.Result != nil:
			consensus.WriteSummary(&b, f.Result)
		case f.Status != runs.StatusRunning:
			consensus.WriteFailureSummary(&b, f.Failure)
		default:
			writeJSON(w, http.StatusConflict, map[string]any{"error": "run still running", "status": f.Status})
			return
		}
		ctype = "text/markdown; charset=utf-8"
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "no such run file (result.json, events.jsonl, summary.md)"})
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(b.Bytes())
}

// allowMemberOrigins lets a page served by another member of this system
// read this node's /v1 endpoints (GET and HEAD only): the console, when
// the node it was opened on dies, keeps reading /v1 from the others. Any
// other origin gets no CORS headers, so browsers keep refusing it; writes
// never get them. Member origins are http(s)://<advertised HTTP address>
// of a member this node lists now or has listed since it started: a
// console opened on a node that died and was since reaped from gossip
// still comes from that node's origin.
func (s *Server) allowMemberOrigins(next http.Handler) http.Handler {
	seen := &seenAddrs{addrs: map[string]bool{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			w.Header().Add("Vary", "Origin")
			if origin := r.Header.Get("Origin"); origin != "" && seen.isMemberOrigin(s.membership.Members(), origin, r.Host) {
				w.Header().Set("Access-Control-Allow-Origin", origin)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxSeenAddrs bounds the remembered member addresses (a system has a
// handful of servers; churn beyond this forgets the oldest set).
const maxSeenAddrs = 1024

// seenAddrs remembers the HTTP addresses of members this node has listed.
type seenAddrs struct {
	mu    sync.Mutex
	addrs map[string]bool
}

// isMemberOrigin reports whether origin is the HTTP address of a current
// or remembered member. A member bound to an unspecified address
// (0.0.0.0:7700) advertises no host a browser can use: its port on the
// host this request named counts.
func (sa *seenAddrs) isMemberOrigin(members []membership.Member, origin, reqHost string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		return false
	}
	reqHostname := reqHost
	if h, _, err := net.SplitHostPort(reqHost); err == nil {
		reqHostname = h
	}
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if len(sa.addrs)+len(members) > maxSeenAddrs {
		clear(sa.addrs)
	}
	for _, m := range members {
		sa.addrs[m.HTTPAddr] = true
	}
	for addr := range sa.addrs {
		if addr == u.Host {
			return true
		}
		host, port, err := net.SplitHostPort(addr)
		if err == nil && (host == "" || net.ParseIP(host).IsUnspecified()) && port == u.Port() && u.Hostname() == reqHostname {
			return true
		}
	}
	return false
}

// placementJSON is one agent in GET /v1/placement.
type placementJSON struct {
	ID       string `json:"id"`
	HomeNode string `json:"homeNode"` // "" for an orphaned agent
}

// handlePlacement lists which node holds each agent's connection (the
// registry's home node, which MAP's Agent object does not carry), from
// this node's replica.
func (s *Server) handlePlacement(w http.ResponseWriter, _ *http.Request) {
	agents := s.registry.Agents()
	out := make([]placementJSON, 0, len(agents))
	for _, a := range agents {
		out = append(out, placementJSON{ID: a.ID, HomeNode: a.HomeNode})
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": s.cfg.NodeID, "agents": out})
}

// handleOperatorHealth serves the autopilot's health report (the leader's
// view; a follower asks the leader): what `concord operator health` shows.
func (s *Server) handleOperatorHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	resp, err := s.cluster.OperatorHealth(ctx)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "operator health: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
		return
	}
	_, _ = w.Write(b)
}
