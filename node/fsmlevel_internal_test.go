package node

import (
	"testing"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
)

// TestLowestFSMLevel: the level mapsvc may propose at is the lowest every
// server advertises: voters and non-voters of the Raft configuration (dead
// ones by their last meta), and alive servers about to be added. A
// configured server gossip does not know may run anything.
func TestLowestFSMLevel(t *testing.T) {
	member := func(id string, level int, st membership.Status) membership.Member {
		return membership.Member{ID: id, NodeMeta: membership.NodeMeta{FSMLevel: level}, Status: st}
	}
	alive, dead, left := membership.StatusAlive, membership.StatusDead, membership.StatusLeft
	config := []raftstore.Server{{ID: "n1", Voter: true}, {ID: "n2", Voter: true}, {ID: "n3", Voter: false}}
	tests := []struct {
		name    string
		servers []raftstore.Server
		members []membership.Member
		want    int
	}{
		{"all new", config, []membership.Member{member("n1", 1, alive), member("n2", 1, alive), member("n3", 1, alive)}, 1},
		{"an old voter (mixed versions)", config, []membership.Member{member("n1", 1, alive), member("n2", 0, alive), member("n3", 1, alive)}, 0},
		{"an old non-voter", config, []membership.Member{member("n1", 1, alive), member("n2", 1, alive), member("n3", 0, alive)}, 0},
		{"a dead server counts by its last meta", config, []membership.Member{member("n1", 1, alive), member("n2", 1, dead), member("n3", 1, alive)}, 1},
		{"a configured server gossip does not know", config, []membership.Member{member("n1", 1, alive), member("n2", 1, alive)}, 0},
		{"an old server about to join", config, []membership.Member{member("n1", 1, alive), member("n2", 1, alive), member("n3", 1, alive), member("n4", 0, alive)}, 0},
		{"an old server that left", config, []membership.Member{member("n1", 1, alive), member("n2", 1, alive), member("n3", 1, alive), member("n4", 0, left)}, 1},
		{"a newer level next to this one", config, []membership.Member{member("n1", 2, alive), member("n2", 1, alive), member("n3", 2, alive)}, 1},
		{"no configuration yet", nil, []membership.Member{member("n1", 1, alive)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lowestFSMLevel(tt.servers, tt.members); got != tt.want {
				t.Fatalf("lowestFSMLevel = %d, want %d", got, tt.want)
			}
		})
	}
}
