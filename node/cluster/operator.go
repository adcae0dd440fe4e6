package cluster

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// HealthSource is the autopilot's report. Implemented by *Reconciler.
type HealthSource interface {
	Health() (HealthReport, bool)
}

// Drainer drains this node: it stops taking MAP sessions, asks the
// connected ones to reconnect elsewhere and leaves the cluster when empty
// or after req.Timeout (0: its default). It returns once the drain started,
// with the number of connections asked to move and the MAP URLs offered.
// Implemented by node.
type Drainer interface {
	Drain(ctx context.Context, req DrainRequest) (sessions int, reconnectTo []string, err error)
}

// DrainRequest is an operator's drain as the drained node receives it.
type DrainRequest struct {
	// Timeout bounds the wait for sessions to move; 0 is the node's default.
	Timeout time.Duration
	// PromotionTimeout bounds a voter's separate wait, after that, for its
	// replacement's promotion and its own demotion; 0 is the node's
	// default.
	PromotionTimeout time.Duration
	// Force drains a voter even when its leaving takes the voters below
	// MinQuorum with no healthy non-voter to replace it (refused otherwise).
	Force bool
}

// ErrDrainRefused wraps a drain the node cannot start (already draining,
// the only server, a voter the system cannot spare without Force);
// answered FAILED_PRECONDITION.
var ErrDrainRefused = errors.New("cluster: drain refused")

// operatorService implements concordv1.OperatorServer for a Server.
type operatorService struct {
	concordv1.UnimplementedOperatorServer
	s *Server
}

// Health answers the leader's report; a follower passes the call to the
// leader once.
func (o *operatorService) Health(ctx context.Context, req *concordv1.OperatorHealthRequest) (*concordv1.OperatorHealthResponse, error) {
	if o.s.deps.Health != nil && o.s.deps.Store.State() == raftstore.StateLeader {
		if rep, ok := o.s.deps.Health.Health(); ok {
			return healthResponse(rep), nil
		}
		return nil, status.Error(codes.Unavailable, "the leader has not checked its servers yet; retry in a moment")
	}
	if req.GetForwarded() {
		return nil, status.Error(codes.Unavailable, "not the leader any more: retry")
	}
	cc, err := o.s.leaderConn()
	if err != nil {
		return nil, err
	}
	return concordv1.NewOperatorClient(cc).Health(passOnAdmin(ctx), &concordv1.OperatorHealthRequest{Forwarded: true})
}

// Drain drains req.NodeId: this node itself, or the named node (the call
// is passed on once).
func (o *operatorService) Drain(ctx context.Context, req *concordv1.OperatorDrainRequest) (*concordv1.OperatorDrainResponse, error) {
	id := req.GetNodeId()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case req.GetTimeoutMs() < 0 || req.GetPromotionTimeoutMs() < 0:
		return nil, status.Error(codes.InvalidArgument, "timeout_ms and promotion_timeout_ms must not be negative")
	case id != o.s.cfg.NodeID && req.GetForwarded():
		return nil, status.Errorf(codes.FailedPrecondition, "drain for %s reached %s", id, o.s.cfg.NodeID)
	case id != o.s.cfg.NodeID:
		if o.s.deps.Members != nil {
			if err := drainTarget(o.s.deps.Members.Members(), id); err != nil {
				return nil, err
			}
		}
		cc, err := o.s.PeerConn(id)
		if err != nil {
			return nil, err
		}
		fwd := &concordv1.OperatorDrainRequest{NodeId: id, TimeoutMs: req.GetTimeoutMs(), PromotionTimeoutMs: req.GetPromotionTimeoutMs(), Force: req.GetForce(), Forwarded: true}
		return concordv1.NewOperatorClient(cc).Drain(passOnAdmin(ctx), fwd)
	case o.s.deps.Drainer == nil:
		return nil, status.Error(codes.Unimplemented, "this node cannot be drained")
	}
	n, urls, err := o.s.deps.Drainer.Drain(ctx, DrainRequest{Timeout: time.Duration(req.GetTimeoutMs()) * time.Millisecond,
		PromotionTimeout: time.Duration(req.GetPromotionTimeoutMs()) * time.Millisecond, Force: req.GetForce()})
	if errors.Is(err, ErrDrainRefused) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "drain %s: %v", id, err)
	}
	return &concordv1.OperatorDrainResponse{NodeId: id, Sessions: uint32(n), ReconnectTo: urls}, nil
}

// AdmitDrain is answered by the leader's Admitter; a follower passes the
// call on to the leader once.
func (o *operatorService) AdmitDrain(ctx context.Context, req *concordv1.AdmitDrainRequest) (*concordv1.AdmitDrainResponse, error) {
	switch {
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case req.GetLeaseMs() <= 0:
		return nil, status.Error(codes.InvalidArgument, "lease_ms must be positive")
	}
	if o.s.deps.Store.State() == raftstore.StateLeader {
		if o.s.deps.Admitter == nil {
			return nil, status.Error(codes.Unimplemented, "this leader does not admit drains")
		}
		left, err := o.s.deps.Admitter.AdmitDrain(ctx, req.GetNodeId(), req.GetForce(), time.Duration(req.GetLeaseMs())*time.Millisecond)
		switch {
		case errors.Is(err, ErrDrainRefused):
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		case errors.Is(err, ErrNotLeader):
			return nil, status.Error(codes.Unavailable, "leadership is changing: retry")
		case err != nil:
			return nil, status.Errorf(codes.Internal, "admit the drain of %s: %v", req.GetNodeId(), err)
		}
		return &concordv1.AdmitDrainResponse{VotersLeft: uint32(max(left, 0))}, nil
	}
	if req.GetForwarded() {
		return nil, status.Error(codes.Unavailable, "not the leader any more: retry")
	}
	cc, err := o.s.leaderConn()
	if err != nil {
		return nil, err
	}
	fwd := &concordv1.AdmitDrainRequest{NodeId: req.GetNodeId(), Force: req.GetForce(), LeaseMs: req.GetLeaseMs(), Forwarded: true}
	return concordv1.NewOperatorClient(cc).AdmitDrain(passOnAdmin(ctx), fwd)
}

// AdmitDrain asks the leader (this node or, once, the leader) to admit
// the drain of id; see Reconciler.AdmitDrain. ctx carries the operator's
// credential of the drain being admitted. An election, or a connection
// to the leader not yet up on a loaded host, answers UNAVAILABLE: asked
// again every admitDrainRetry until ctx ends.
func (s *Server) AdmitDrain(ctx context.Context, id string, force bool, lease time.Duration) (*concordv1.AdmitDrainResponse, error) {
	req := &concordv1.AdmitDrainRequest{NodeId: id, Force: force, LeaseMs: max(lease.Milliseconds(), 1)}
	for {
		resp, err := (&operatorService{s: s}).AdmitDrain(ctx, req)
		if status.Code(err) != codes.Unavailable || !sleepCtx(ctx, admitDrainRetry) {
			return resp, err
		}
	}
}

// admitDrainRetry is the pause between AdmitDrain's attempts.
const admitDrainRetry = 100 * time.Millisecond

// drainTarget checks that id names an alive member before the drain is
// passed on, so a typo or a node already gone is answered as what it is
// (NOT_FOUND, FAILED_PRECONDITION), not as an unreachable node worth a
// retry.
func drainTarget(members []membership.Member, id string) error {
	for _, m := range members {
		if m.ID != id {
			continue
		}
		if m.Status != membership.StatusAlive {
			return status.Errorf(codes.FailedPrecondition, "node %s is %s: nothing to drain", id, m.Status)
		}
		return nil
	}
	return status.Errorf(codes.NotFound, "no node %q in this system (concord members lists them)", id)
}

func healthResponse(rep HealthReport) *concordv1.OperatorHealthResponse {
	out := &concordv1.OperatorHealthResponse{
		LeaderId: rep.LeaderID, Healthy: rep.Healthy, FailureTolerance: int32(rep.FailureTolerance),
		TargetVoters: uint32(rep.TargetVoters), MinQuorum: uint32(rep.MinQuorum), ObservedAtMs: rep.ObservedAt.UnixMilli(),
		SystemFsmLevel: uint32(max(rep.SystemFSMLevel, 0)),
	}
	for _, sv := range rep.Servers {
		p := &concordv1.ServerHealth{
			Id: sv.ID, Address: sv.Address, Voter: sv.Voter, Leader: sv.Leader, Status: sv.Status, Version: sv.Version,
			LastContactMs: sv.LastContact.Milliseconds(), LastIndex: sv.LastIndex, TrailingLogs: sv.TrailingLogs,
			Healthy: sv.Healthy, Reason: sv.Reason, Draining: sv.Draining, FsmLevel: uint32(max(sv.FSMLevel, 0)),
		}
		if sv.LastContact < 0 {
			p.LastContactMs = -1
		}
		if !sv.StableSince.IsZero() {
			p.StableSinceMs = sv.StableSince.UnixMilli()
		}
		out.Servers = append(out.Servers, p)
	}
	return out
}

// OperatorHealth is the Health RPC for this process's own callers (the
// HTTP API): the leader's report, asked of the leader from a follower.
func (s *Server) OperatorHealth(ctx context.Context) (*concordv1.OperatorHealthResponse, error) {
	return (&operatorService{s: s}).Health(ctx, &concordv1.OperatorHealthRequest{})
}
