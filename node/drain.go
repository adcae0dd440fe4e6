package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/membership"
)

// Draining a node (concord operator drain) moves its participants to the
// other nodes before it leaves, so an operator can scale in or replace a
// server without failing a session:
//
//  1. The node advertises draining in gossip (the leader's autopilot stops
//     counting it as a voter, promotes a replacement, then demotes it),
//     /v1/ready turns unready (load balancers stop sending clients) and new
//     MAP connections get 503 with Retry-After.
//  2. Every connection gets the x-concord/reconnect notification, which
//     lists the other nodes' MAP URLs, and is closed with WebSocket 1012
//     ("service restart"). Each close detaches the session as a dropped
//     connection does, so the client resumes it on another node with its
//     sessionId and resumeToken: subscriptions and cursors are replicated.
//  3. Once no session is homed here any more, or the timeout passed, the
//     node hands leadership away if it has it and leaves gossip gracefully;
//     the leader removes it from the Raft configuration at once. Drained
//     then closes and the owner (concord server) shuts the node down.

// reconnectHint is the params of the x-concord/reconnect notification.
type reconnectHint struct {
	Reason string          `json:"reason"`
	NodeID string          `json:"nodeId"`
	Nodes  []reconnectNode `json:"nodes"`
}

type reconnectNode struct {
	NodeID string `json:"nodeId"`
	URL    string `json:"url"`
}

// drainPoll is how often the drain checks whether its sessions moved.
const drainPoll = 100 * time.Millisecond

// Drain implements cluster.Drainer (see above). It returns once the
// connections were asked to move; the rest runs on a loop the server owns.
func (s *Server) Drain(_ context.Context, timeout time.Duration) (int, []string, error) {
	if timeout <= 0 {
		timeout = s.cfg.DrainTimeout
	}
	if !s.caughtUp.Load() {
		return 0, nil, fmt.Errorf("%w: %s has not finished starting", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	others := s.otherNodes()
	if len(others) == 0 {
		return 0, nil, fmt.Errorf("%w: %s is the only alive server; there is nowhere to move its sessions", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	switch {
	case s.stopping:
		return 0, nil, fmt.Errorf("%w: %s is shutting down", cluster.ErrDrainRefused, s.cfg.NodeID)
	case s.draining.Load():
		return 0, nil, fmt.Errorf("%w: %s is already draining", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	s.draining.Store(true)
	urls := make([]string, 0, len(others))
	for _, n := range others {
		urls = append(urls, n.URL)
	}
	s.log.Info("draining: moving sessions to other nodes", "timeout", timeout, "others", urls)
	s.goLoopLocked("drain", func() error { return s.finishDrain(s.runCtx, timeout) })
	n := s.rpc.Drain(mapsvc.ReconnectNotification,
		reconnectHint{Reason: "draining", NodeID: s.cfg.NodeID, Nodes: others}, "node draining: reconnect to another node")
	return n, urls, nil
}

// Drained is closed once a drain has finished: the node left the cluster
// and its owner should Shutdown it.
func (s *Server) Drained() <-chan struct{} { return s.drained }

// Draining reports whether the node is being drained.
func (s *Server) Draining() bool { return s.draining.Load() }

// otherNodes lists the alive servers other than this one, with the MAP
// URL clients should reconnect to.
func (s *Server) otherNodes() []reconnectNode {
	scheme := "ws://"
	if s.httpTLS() {
		scheme = "wss://"
	}
	var out []reconnectNode
	for _, m := range s.membership.Members() {
		if m.ID == s.cfg.NodeID || m.Status != membership.StatusAlive || m.Draining || m.HTTPAddr == "" {
			continue
		}
		out = append(out, reconnectNode{NodeID: m.ID, URL: scheme + m.HTTPAddr + "/map"})
	}
	slices.SortFunc(out, func(a, b reconnectNode) int {
		if a.NodeID < b.NodeID {
			return -1
		}
		return 1
	})
	return out
}

// finishDrain waits for the sessions to move (or the timeout), then leaves.
func (s *Server) finishDrain(ctx context.Context, timeout time.Duration) error {
	if err := s.membership.SetDraining(ctx); err != nil {
		s.log.Warn("draining flag not yet acknowledged by gossip; it spreads with the next rounds", "err", err)
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for left := s.homedSessions(); left > 0 || s.rpc.NumConns() > 0; left = s.homedSessions() {
		if time.Now().After(deadline) {
			s.log.Warn("drain timeout: leaving with sessions still homed here", "sessions", left, "connections", s.rpc.NumConns())
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if s.store.IsLeader() {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.store.LeadershipTransfer(tctx); err != nil {
			s.log.Warn("drain: leadership transfer failed; leaving anyway (the others elect a leader)", "err", err)
		}
		cancel()
	}
	if err := s.membership.Leave(ctx); err != nil {
		return fmt.Errorf("drain: leave gossip: %w", err)
	}
	s.waitRemoved(ctx, 2*s.cfg.Cluster.ReconcileInterval+time.Second)
	s.log.Info("drained: left the cluster; shut the node down")
	close(s.drained)
	return nil
}

// homedSessions counts the connected sessions the registry says this node
// holds.
func (s *Server) homedSessions() int {
	n := 0
	for _, ss := range s.registry.Sessions() {
		if ss.Connected && ss.ClosedAt == 0 && ss.HomeNode == s.cfg.NodeID {
			n++
		}
	}
	return n
}

// waitRemoved waits (up to max) until the Raft configuration this node
// knows no longer holds it: the leader removed it after the leave.
func (s *Server) waitRemoved(ctx context.Context, max time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		if s.outOfConfiguration() {
			return
		}
		select {
		case <-ctx.Done():
			s.log.Warn("drain: still in the raft configuration; the leader removes it once it sees the leave")
			return
		case <-tick.C:
		}
	}
}
