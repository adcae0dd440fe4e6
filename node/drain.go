package node

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
//  3. A leader hands leadership away first. Once no session is homed here
//     any more (or the timeout passed) and then, for a voter that a
//     non-voter can replace, the autopilot has demoted it (or the separate
//     promotion timeout passed), the node leaves gossip gracefully; the
//     leader removes it from the Raft configuration at once. Drained then
//     closes and the owner (concord server) shuts the node down.
//
// Before step 1 the leader admits the drain (admitDrain): it decides the
// drains one at a time, counting those in flight against --min-quorum.

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
func (s *Server) Drain(ctx context.Context, req cluster.DrainRequest) (int, []string, error) {
	timeout, promotion := req.Timeout, req.PromotionTimeout
	if timeout <= 0 {
		timeout = s.cfg.DrainTimeout
	}
	if promotion <= 0 {
		promotion = s.cfg.DrainPromotionTimeout
	}
	if !s.caughtUp.Load() {
		return 0, nil, fmt.Errorf("%w: %s has not finished starting", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	others := s.otherNodes()
	if len(others) == 0 {
		return 0, nil, fmt.Errorf("%w: %s is the only alive server; there is nowhere to move its sessions", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	if s.draining.Load() {
		return 0, nil, fmt.Errorf("%w: %s is already draining", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	// The lease covers the whole drain: the sessions' wait, the
	// promotion's, and the leave.
	if err := s.admitDrain(ctx, req.Force, timeout+promotion+drainLeaveSlack); err != nil {
		return 0, nil, err
	}
	if err := s.startDrain(timeout, promotion); err != nil {
		return 0, nil, err
	}
	urls := make([]string, 0, len(others))
	for _, n := range others {
		urls = append(urls, n.URL)
	}
	s.log.Info("draining: moving sessions to other nodes", "timeout", timeout, "promotion_timeout", promotion, "others", urls)
	n := s.rpc.Drain(mapsvc.ReconnectNotification,
		reconnectHint{Reason: "draining", NodeID: s.cfg.NodeID, Nodes: others}, "node draining: reconnect to another node")
	return n, urls, nil
}

// drainLeaveSlack is added to a drain's lease for the hand-off and the
// leave after its waits.
const drainLeaveSlack = 30 * time.Second

// admitDrain asks the leader to admit this node's drain (cluster
// drainadmit.go): the leader decides drains one at a time, counting those
// in flight, so two drains asked at once cannot both pass the --min-quorum
// check. A leader of a version without admissions (UNIMPLEMENTED) leaves
// the decision to this node's own view, as before; a leader that cannot be
// reached refuses the drain unless force.
func (s *Server) admitDrain(ctx context.Context, force bool, lease time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, admitDrainTimeout)
	defer cancel()
	// cluster.Server.AdmitDrain retries an unavailable leader until ctx ends.
	_, err := s.cluster.AdmitDrain(ctx, s.cfg.NodeID, force, lease)
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %s", cluster.ErrDrainRefused, status.Convert(err).Message())
	case codes.Unimplemented:
		s.log.Info("the leader does not admit drains (an older version): checking --min-quorum from this node's view")
		return s.checkVoterFloor(ctx, force)
	}
	if force {
		s.log.Warn("drain not admitted by the leader (forced: draining anyway)", "err", err)
		return nil
	}
	return fmt.Errorf("%w: %s cannot ask the leader to admit its drain (%v): retry once a leader answers, or drain with --force",
		cluster.ErrDrainRefused, s.cfg.NodeID, err)
}

// admitDrainTimeout bounds admitDrain (the caller's deadline may be
// shorter).
const admitDrainTimeout = 15 * time.Second

// checkVoterFloor refuses, unless force, the drain of a voter whose
// leaving would take the voters below --min-quorum with no healthy
// non-voter to promote in its place, as this node sees the system: the
// fallback of admitDrain under a leader that does not admit drains. With
// force the drain goes on, logged as a warning.
func (s *Server) checkVoterFloor(ctx context.Context, force bool) error {
	servers, err := s.store.Configuration(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s cannot read the raft configuration to count the voters left: %v", cluster.ErrDrainRefused, s.cfg.NodeID, err)
	}
	left, short := cluster.DrainFloor(servers, s.membership.Members(), nil, s.cfg.NodeID, s.cfg.Cluster.MinQuorum)
	if !short {
		return nil
	}
	if force {
		s.log.Warn("draining a voter below --min-quorum (forced): the system tolerates one failure fewer until another server joins",
			"voters_left", left, "min_quorum", s.cfg.Cluster.MinQuorum)
		return nil
	}
	return fmt.Errorf("%w: %s votes and no healthy non-voter can take its place: leaving would leave %d alive voters, below --min-quorum %d "+
		"(start another server first, or drain with --force to accept one failure fewer tolerated until one joins)",
		cluster.ErrDrainRefused, s.cfg.NodeID, left, s.cfg.Cluster.MinQuorum)
}

// startDrain marks the node draining and starts the loop that finishes
// the drain, unless it is shutting down or already draining.
func (s *Server) startDrain(timeout, promotion time.Duration) error {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	switch {
	case s.stopping:
		return fmt.Errorf("%w: %s is shutting down", cluster.ErrDrainRefused, s.cfg.NodeID)
	case s.draining.Load():
		return fmt.Errorf("%w: %s is already draining", cluster.ErrDrainRefused, s.cfg.NodeID)
	}
	s.draining.Store(true)
	s.goLoopLocked("drain", func() error { return s.finishDrain(s.runCtx, timeout, promotion) })
	return nil
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
		out = append(out, reconnectNode{NodeID: m.ID, URL: scheme + reachableHTTPAddr(m) + "/map"})
	}
	slices.SortFunc(out, func(a, b reconnectNode) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return out
}

// reachableHTTPAddr is m's HTTP address as a client can dial it. A node
// listening on all interfaces (--http-addr 0.0.0.0:7700, as on Kubernetes)
// advertises 0.0.0.0 or [::], which names no host: its HTTP port is then
// put on the host of an address it advertises for peers (gRPC, else Raft,
// else gossip: on Kubernetes the pod's DNS name), which is where the node
// is reachable.
func reachableHTTPAddr(m membership.Member) string {
	host, port, err := net.SplitHostPort(m.HTTPAddr)
	if err != nil || (host != "" && !net.ParseIP(host).IsUnspecified()) {
		return m.HTTPAddr
	}
	for _, a := range []string{m.GRPCAddr, m.RaftAddr, m.GossipAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
			return net.JoinHostPort(h, port)
		}
	}
	return m.HTTPAddr
}

// finishDrain hands leadership away, waits for the sessions to move (up to
// timeout), then, separately and up to promotion, for the autopilot to
// replace this node if it votes, then leaves.
func (s *Server) finishDrain(ctx context.Context, timeout, promotion time.Duration) error {
	if err := s.membership.SetDraining(ctx); err != nil {
		s.log.Warn("draining flag not yet acknowledged by gossip; it spreads with the next rounds", "err", err)
	}
	// First, so that the new leader's autopilot, seeing this node
	// draining, promotes a replacement while the sessions move.
	s.handOffLeadership(ctx)
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	wait := func(what string, bound time.Duration, done func() bool) error {
		deadline := time.Now().Add(bound)
		for !done() {
			if time.Now().After(deadline) {
				s.log.Warn("drain timeout: going on", "waited_for", what, "bound", bound,
					"sessions", s.homedSessions(), "connections", s.rpc.NumConns())
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		return nil
	}
	if err := wait("sessions to move", timeout, func() bool { return s.homedSessions() == 0 && s.rpc.NumConns() == 0 }); err != nil {
		return err
	}
	// A voter leaves only once demoted: its removal then never takes the
	// voters below the target while a non-voter could replace it. This
	// wait has its own bound, so a drain whose sessions took all of
	// timeout still gives a slow promotion (a replacement that must first
	// be stable for ServerStabilizationTime) its time.
	if err := wait("demotion to non-voter (a replacement's promotion)", promotion, s.replacedOrIrreplaceable); err != nil {
		return err
	}
	s.handOffLeadership(ctx)
	if err := s.membership.Leave(ctx); err != nil {
		return fmt.Errorf("drain: leave gossip: %w", err)
	}
	s.waitRemoved(ctx, 2*s.cfg.Cluster.ReconcileInterval+time.Second)
	s.log.Info("drained: left the cluster; shut the node down")
	close(s.drained)
	return nil
}

// handOffLeadership transfers leadership away when this node leads.
func (s *Server) handOffLeadership(ctx context.Context) {
	if !s.store.IsLeader() {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.store.LeadershipTransfer(tctx); err != nil {
		s.log.Warn("drain: leadership transfer failed; the next step retries, leaving lets the others elect", "err", err)
	}
}

// replacedOrIrreplaceable reports whether this node no longer votes, or
// votes but no other non-voter exists to take its place (then waiting for
// a demotion would only wait out the timeout).
func (s *Server) replacedOrIrreplaceable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	servers, err := s.store.Configuration(ctx)
	if err != nil {
		return false
	}
	voter, spare := false, false
	for _, sv := range servers {
		switch {
		case sv.ID == s.cfg.NodeID:
			voter = sv.Voter
		case !sv.Voter:
			spare = true
		}
	}
	return !voter || !spare || s.cfg.Cluster.RaftVoters == 0
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
