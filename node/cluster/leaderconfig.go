package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// maxConfigProbes bounds the RaftPeers calls one LeaderConfiguration makes.
const maxConfigProbes = 4

// LeaderConfiguration asks live gossip peers, over RaftPeers, for the Raft
// configuration as a server with a leader knows it, and returns its server
// ids. The leader's own answer is preferred: a follower's may trail it (a
// server just added), so a follower that names a leader is followed to it,
// and its answer is used only when the leader cannot be reached. Each call
// gets at most perCall of ctx, so one unreachable peer does not use it up.
// It is for reporting only (a node removed while its removal entry never
// reached it learns why no leader talks to it); it never changes Raft state.
func (s *Server) LeaderConfiguration(ctx context.Context, perCall time.Duration) ([]string, error) {
	if s.deps.Members == nil || s.deps.Resolver == nil {
		return nil, errors.New("cluster: no gossip or address resolver to find a leader")
	}
	self := s.deps.Store.ID()
	var queue []string
	for _, m := range s.deps.Members.Members() {
		if m.ID != self && m.Status == membership.StatusAlive {
			queue = append(queue, m.ID)
		}
	}
	tried := map[string]bool{}
	var fallback []string // a follower's view, while it names a leader
	err := errors.New("cluster: no live peer to ask")
	for len(queue) > 0 && len(tried) < maxConfigProbes && ctx.Err() == nil {
		id := queue[0]
		queue = queue[1:]
		if tried[id] {
			continue
		}
		tried[id] = true
		resp, cerr := s.raftPeersOf(ctx, id, perCall)
		if cerr != nil {
			err = cerr
			continue
		}
		switch leader := leaderIn(resp); {
		case leader == id:
			return peerIDs(resp), nil
		case leader != "" && leader != self:
			if fallback == nil {
				fallback = peerIDs(resp)
			}
			queue = append([]string{leader}, queue...)
		default:
			err = fmt.Errorf("cluster: %s knows no leader", id)
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	return nil, err
}

func peerIDs(resp *concordv1.RaftPeersResponse) []string {
	ids := make([]string, 0, len(resp.GetPeers()))
	for _, p := range resp.GetPeers() {
		ids = append(ids, p.GetId())
	}
	return ids
}

// leaderIn returns the id of the peer resp marks as leader, or "".
func leaderIn(resp *concordv1.RaftPeersResponse) string {
	for _, p := range resp.GetPeers() {
		if p.GetLeader() {
			return p.GetId()
		}
	}
	return ""
}

// raftPeersOf calls node id's RaftPeers, for at most timeout.
func (s *Server) raftPeersOf(ctx context.Context, id string, timeout time.Duration) (*concordv1.RaftPeersResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr, ok := s.deps.Resolver.GRPCAddr(id)
	if !ok {
		return nil, fmt.Errorf("cluster: %s has no known grpc address", id)
	}
	cc, err := s.pool.get(id, addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial %s: %w", id, err)
	}
	resp, err := concordv1.NewClusterClient(cc).RaftPeers(ctx, &concordv1.RaftPeersRequest{})
	if err != nil {
		return nil, fmt.Errorf("cluster: raft peers of %s: %w", id, err)
	}
	return resp, nil
}
