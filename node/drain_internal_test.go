package node

import (
	"testing"

	"github.com/concordmap/concord/node/membership"
)

// The reconnect hint of a drain names a host clients can dial, also for
// a node that listens on all interfaces.
func TestReachableHTTPAddr(t *testing.T) {
	member := func(http, grpc, raft, gossip string) membership.Member {
		return membership.Member{GossipAddr: gossip, NodeMeta: membership.NodeMeta{HTTPAddr: http, GRPCAddr: grpc, RaftAddr: raft}}
	}
	pod := "concord-1.concord-peers.dc1.svc.cluster.local"
	tests := []struct {
		name string
		m    membership.Member
		want string
	}{
		{"a specific address is kept", member("10.0.0.11:7700", "10.0.0.11:7701", "10.0.0.11:7702", "10.0.0.11:7703"), "10.0.0.11:7700"},
		{"a DNS name is kept", member("n1.example:7700", "", "", ""), "n1.example:7700"},
		{"all interfaces: the gRPC advertise host (Kubernetes)", member("0.0.0.0:7700", pod+":7701", pod+":7702", "10.1.2.3:7703"), pod + ":7700"},
		{"IPv6 all interfaces", member("[::]:7700", "[fd00::5]:7701", "", ""), "[fd00::5]:7700"},
		{"gRPC unspecified too: the Raft host", member("0.0.0.0:7700", "0.0.0.0:7701", "10.0.0.12:7702", "10.0.0.12:7703"), "10.0.0.12:7700"},
		{"only gossip names a host", member(":7700", ":7701", "", "10.0.0.13:7703"), "10.0.0.13:7700"},
		{"nothing better known", member("0.0.0.0:7700", "", "", ""), "0.0.0.0:7700"},
		{"not host:port", member("garbage", pod+":7701", "", ""), "garbage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reachableHTTPAddr(tt.m); got != tt.want {
				t.Fatalf("reachableHTTPAddr = %q, want %q", got, tt.want)
			}
		})
	}
}
