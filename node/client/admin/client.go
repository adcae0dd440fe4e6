package admin

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Client calls the operator services of one node over cc.
type Client struct {
	cluster  concordv1.ClusterClient
	admin    concordv1.AdminClient
	fed      concordv1.FederationClient
	acl      concordv1.AclAdminClient
	operator concordv1.OperatorClient
}

// New returns a Client over cc; closing cc stays with the caller.
func New(cc grpc.ClientConnInterface) *Client {
	return &Client{
		cluster:  concordv1.NewClusterClient(cc),
		admin:    concordv1.NewAdminClient(cc),
		fed:      concordv1.NewFederationClient(cc),
		acl:      concordv1.NewAclAdminClient(cc),
		operator: concordv1.NewOperatorClient(cc),
	}
}

// Member is one gossip member as the node sees it.
type Member struct {
	ID, Status               string // Status: alive, suspect, dead, left, ...
	Gossip, HTTP, GRPC, Raft string // addresses
	Version                  string
}

// Members lists the gossip members of the system.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	res, err := c.cluster.Members(ctx, &concordv1.MembersRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(res.GetMembers()))
	for _, m := range res.GetMembers() {
		out = append(out, Member{
			ID:      m.GetId(),
			Status:  enumName(m.GetStatus().String(), "MEMBER_STATUS_"),
			Gossip:  m.GetGossipAddress(),
			HTTP:    m.GetHttpAddress(),
			GRPC:    m.GetGrpcAddress(),
			Raft:    m.GetRaftAddress(),
			Version: m.GetVersion(),
		})
	}
	return out, nil
}

// RaftPeer is one server of the Raft configuration.
type RaftPeer struct {
	ID, Address string
	Suffrage    string // voter, nonvoter, ...
	Leader      bool
}

// RaftPeers lists the Raft servers, their suffrage and the leader.
func (c *Client) RaftPeers(ctx context.Context) ([]RaftPeer, error) {
	res, err := c.cluster.RaftPeers(ctx, &concordv1.RaftPeersRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]RaftPeer, 0, len(res.GetPeers()))
	for _, p := range res.GetPeers() {
		out = append(out, RaftPeer{ID: p.GetId(), Address: p.GetAddress(),
			Suffrage: enumName(p.GetSuffrage().String(), "RAFT_SUFFRAGE_"), Leader: p.GetLeader()})
	}
	return out, nil
}

// RemovePeer removes server id from the Raft configuration; force removes
// it even while gossip sees it alive.
func (c *Client) RemovePeer(ctx context.Context, id string, force bool) error {
	_, err := c.cluster.RemovePeer(ctx, &concordv1.RemovePeerRequest{Id: id, Force: force})
	return err
}

// enumName is a proto enum value's name without its prefix, lower case.
func enumName(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }
