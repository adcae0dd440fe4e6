package cluster

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// service implements concordv1.ClusterServer for a Server.
type service struct {
	concordv1.UnimplementedClusterServer
	s *Server
}

// Forward applies a command forwarded by a follower (see cluster.proto)
// and returns its index and, when the module encodes it, its outcome.
func (v *service) Forward(ctx context.Context, req *concordv1.ForwardRequest) (*concordv1.ForwardResponse, error) {
	reply, err := v.s.deps.Store.ApplyForwardedFrom(ctx, req.GetOriginNodeId(), req.GetCommand())
	if err != nil {
		v.s.log.Debug("forwarded command refused", "peer", req.GetOriginNodeId(), "err", err)
		return nil, v.s.storeStatus(err)
	}
	return &concordv1.ForwardResponse{Index: reply.Index, Result: encodedResult(reply)}, nil
}

// storeStatus translates a raftstore error into a gRPC status carrying a
// ForwardError detail (the one place this package maps store errors).
func (s *Server) storeStatus(err error) error {
	fe := &concordv1.ForwardError{}
	var code codes.Code
	var nl *raftstore.NotLeaderError
	switch {
	case errors.As(err, &nl):
		code, fe.Reason = codes.FailedPrecondition, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_NOT_LEADER
		fe.LeaderId, fe.LeaderRaftAddress = nl.LeaderID, nl.LeaderAddr
		if s.deps.Resolver != nil {
			fe.LeaderGrpcAddress, _ = s.deps.Resolver.GRPCAddr(nl.LeaderID)
		}
	case errors.Is(err, raftstore.ErrDiskFull):
		code, fe.Reason = codes.ResourceExhausted, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_DISK_FULL
	case errors.Is(err, raftstore.ErrNoLeader):
		code, fe.Reason = codes.Unavailable, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_NO_LEADER
	case errors.Is(err, raftstore.ErrLeadershipLost):
		code, fe.Reason = codes.Aborted, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_LEADERSHIP_LOST
	case errors.Is(err, raftstore.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code, fe.Reason = codes.DeadlineExceeded, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_TIMEOUT
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, raftstore.ErrShutdown):
		code, fe.Reason = codes.Unavailable, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_SHUTDOWN
	case errors.Is(err, raftstore.ErrUnknownCommand):
		code, fe.Reason = codes.InvalidArgument, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_UNKNOWN_COMMAND
	case errors.Is(err, raftstore.ErrInvalidCommand):
		code, fe.Reason = codes.InvalidArgument, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_INVALID_COMMAND
	default:
		code = codes.Internal
	}
	st, derr := status.New(code, err.Error()).WithDetails(fe)
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// Members lists the gossip members this node knows.
func (v *service) Members(context.Context, *concordv1.MembersRequest) (*concordv1.MembersResponse, error) {
	resp := &concordv1.MembersResponse{}
	if v.s.deps.Members == nil {
		return resp, nil
	}
	for _, m := range v.s.deps.Members.Members() {
		resp.Members = append(resp.Members, &concordv1.ClusterMember{
			Id: m.ID, SystemId: m.SystemID, GossipAddress: m.GossipAddr,
			HttpAddress: m.HTTPAddr, GrpcAddress: m.GRPCAddr, RaftAddress: m.RaftAddr,
			Version: m.Version, Role: string(m.Role), Status: memberStatus(m.Status),
			Bootstrapped: m.Bootstrapped,
		})
	}
	return resp, nil
}

func memberStatus(s membership.Status) concordv1.MemberStatus {
	switch s {
	case membership.StatusAlive:
		return concordv1.MemberStatus_MEMBER_STATUS_ALIVE
	case membership.StatusLeft:
		return concordv1.MemberStatus_MEMBER_STATUS_LEFT
	case membership.StatusDead:
		return concordv1.MemberStatus_MEMBER_STATUS_DEAD
	}
	return concordv1.MemberStatus_MEMBER_STATUS_UNSPECIFIED
}

// RaftPeers lists the Raft configuration as this node knows it.
func (v *service) RaftPeers(ctx context.Context, _ *concordv1.RaftPeersRequest) (*concordv1.RaftPeersResponse, error) {
	servers, err := v.s.deps.Store.Configuration(ctx)
	if err != nil {
		return nil, v.s.storeStatus(err)
	}
	leader, _ := v.s.deps.Store.Leader()
	resp := &concordv1.RaftPeersResponse{}
	for _, sv := range servers {
		p := &concordv1.RaftPeer{Id: sv.ID, Address: sv.Address, Leader: sv.ID == leader,
			Suffrage: concordv1.RaftSuffrage_RAFT_SUFFRAGE_NONVOTER}
		if sv.Voter {
			p.Suffrage = concordv1.RaftSuffrage_RAFT_SUFFRAGE_VOTER
		}
		resp.Peers = append(resp.Peers, p)
	}
	return resp, nil
}

// RemovePeer removes a server from the Raft configuration; a follower
// passes the request to the leader once. A server this node's gossip sees
// alive is refused unless req.Force: the leader's reconciler adds alive
// servers back, so the removal would silently undo itself. A forced
// removal stays in effect until the server leaves, dies or rejoins (see
// removedAlive in reconciler_removed.go).
func (v *service) RemovePeer(ctx context.Context, req *concordv1.RemovePeerRequest) (*concordv1.RemovePeerResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	if req.GetForce() && !hasAdminMarker(ctx) {
		return nil, status.Errorf(codes.PermissionDenied,
			"a forced removal is an admin action: send it as an operator (concord raft remove-peer --force), "+
				"with the %s metadata marker", AdminMetadataKey)
	}
	if !req.GetForce() && v.s.memberAlive(req.GetId()) {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s is alive in gossip, so the leader would add it back to raft at once: stop the node first "+
				"(or stop it with a graceful leave, concord server --leave-on-shutdown, which removes it by itself), "+
				"or pass --force to remove it while it runs (it is then kept out until it leaves, dies or rejoins)", req.GetId())
	}
	err := v.s.deps.Store.RemoveServer(ctx, req.GetId())
	var nl *raftstore.NotLeaderError
	if errors.As(err, &nl) && !req.GetForwarded() && v.s.deps.Resolver != nil {
		if addr, ok := v.s.deps.Resolver.GRPCAddr(nl.LeaderID); ok {
			cc, perr := v.s.pool.get(nl.LeaderID, addr)
			if perr != nil {
				return nil, status.Error(codes.Unavailable, perr.Error())
			}
			return concordv1.NewClusterClient(cc).RemovePeer(passOnAdmin(ctx), &concordv1.RemovePeerRequest{Id: req.GetId(), Forwarded: true, Force: req.GetForce()})
		}
	}
	if err != nil {
		return nil, v.s.storeStatus(err)
	}
	v.s.log.Info("raft peer removed by request", "peer", req.GetId(), "force", req.GetForce())
	return &concordv1.RemovePeerResponse{}, nil
}

// memberAlive reports whether gossip (when this server has it) sees node
// id alive.
func (s *Server) memberAlive(id string) bool {
	if s.deps.Members == nil {
		return false
	}
	for _, m := range s.deps.Members.Members() {
		if m.ID == id {
			return m.Status == membership.StatusAlive
		}
	}
	return false
}

// Status reports this node's Raft view.
func (v *service) Status(ctx context.Context, _ *concordv1.StatusRequest) (*concordv1.StatusResponse, error) {
	st := v.s.deps.Store
	id, addr := st.Leader()
	resp := &concordv1.StatusResponse{
		NodeId: st.ID(), RaftState: st.State().String(), LeaderId: id, LeaderAddress: addr,
		AppliedIndex: st.AppliedIndex(), RaftStats: st.Stats(),
	}
	if servers, err := st.Configuration(ctx); err == nil {
		for _, sv := range servers {
			if sv.Voter {
				resp.Voters++
			}
		}
	}
	return resp, nil
}
