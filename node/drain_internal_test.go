package node

import (
	"testing"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
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

// A voter's drain falls short of --min-quorum when the voters still alive
// and not draining are fewer than it without it and no usable non-voter
// can be promoted; a non-voter's never does.
func TestVotersAfterLeaving(t *testing.T) {
	voter := func(id string) raftstore.Server { return raftstore.Server{ID: id, Voter: true} }
	spare := func(id string) raftstore.Server { return raftstore.Server{ID: id} }
	alive := func(id string) membership.Member { return membership.Member{ID: id, Status: membership.StatusAlive} }
	draining := func(id string) membership.Member {
		m := alive(id)
		m.Draining = true
		return m
	}
	dead := func(id string) membership.Member { return membership.Member{ID: id, Status: membership.StatusDead} }
	three := []raftstore.Server{voter("a"), voter("b"), voter("c")}
	tests := []struct {
		name      string
		servers   []raftstore.Server
		members   []membership.Member
		minQuorum int
		left      int
		short     bool
	}{
		{"three voters, floor 3", three, []membership.Member{alive("a"), alive("b"), alive("c")}, 3, 2, true},
		{"three voters, floor 2", three, []membership.Member{alive("a"), alive("b"), alive("c")}, 2, 2, false},
		{"a healthy non-voter to promote", append(three, spare("d")), []membership.Member{alive("a"), alive("b"), alive("c"), alive("d")}, 3, 2, false},
		{"the non-voter is draining", append(three, spare("d")), []membership.Member{alive("a"), alive("b"), alive("c"), draining("d")}, 3, 2, true},
		{"the non-voter is dead", append(three, spare("d")), []membership.Member{alive("a"), alive("b"), alive("c"), dead("d")}, 3, 2, true},
		{"five voters, one draining already", []raftstore.Server{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")},
			[]membership.Member{alive("a"), alive("b"), alive("c"), draining("d"), alive("e")}, 3, 3, false},
		{"five voters, two draining already", []raftstore.Server{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")},
			[]membership.Member{alive("a"), alive("b"), draining("c"), draining("d"), alive("e")}, 3, 2, true},
		{"a non-voter drains", []raftstore.Server{spare("a"), voter("b"), voter("c"), voter("d")},
			[]membership.Member{alive("a"), alive("b"), alive("c"), alive("d")}, 3, 3, false},
		{"a non-voter drains, voters short already", []raftstore.Server{spare("a"), voter("b"), voter("c")},
			[]membership.Member{alive("a"), alive("b"), alive("c")}, 3, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left, short := votersAfterLeaving(tt.servers, tt.members, "a", tt.minQuorum)
			if left != tt.left || short != tt.short {
				t.Fatalf("votersAfterLeaving = %d, %v; want %d, %v", left, short, tt.left, tt.short)
			}
		})
	}
}
