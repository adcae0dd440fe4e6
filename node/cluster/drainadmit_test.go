package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
)

// A drain falls short of --min-quorum when the voters that stay plus the
// non-voters that can be promoted, with every drain in flight gone, are
// fewer than it, the drained node's leaving lowers that, and a voter is
// among the leaving; a non-voter's drain is refused only when a voter's
// replacement needs it.
func TestDrainFloor(t *testing.T) {
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
	five := []raftstore.Server{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")}
	all := func(ids ...string) []membership.Member {
		var out []membership.Member
		for _, id := range ids {
			out = append(out, alive(id))
		}
		return out
	}
	tests := []struct {
		name      string
		servers   []raftstore.Server
		members   []membership.Member
		leaving   map[string]bool
		minQuorum int
		left      int
		short     bool
	}{
		{"three voters, floor 3", three, all("a", "b", "c"), nil, 3, 2, true},
		{"three voters, floor 2", three, all("a", "b", "c"), nil, 2, 2, false},
		{"a healthy non-voter to promote", append(three, spare("d")), all("a", "b", "c", "d"), nil, 3, 3, false},
		{"the non-voter is draining", append(three, spare("d")), []membership.Member{alive("a"), alive("b"), alive("c"), draining("d")}, nil, 3, 2, true},
		{"the non-voter is dead", append(three, spare("d")), []membership.Member{alive("a"), alive("b"), alive("c"), dead("d")}, nil, 3, 2, true},
		{"five voters, one draining already", five, []membership.Member{alive("a"), alive("b"), alive("c"), draining("d"), alive("e")}, nil, 3, 3, false},
		{"five voters, two draining already", five, []membership.Member{alive("a"), alive("b"), draining("c"), draining("d"), alive("e")}, nil, 3, 2, true},
		{"a non-voter drains", []raftstore.Server{spare("a"), voter("b"), voter("c"), voter("d")}, all("a", "b", "c", "d"), nil, 3, 3, false},
		{"a non-voter drains, voters short already", []raftstore.Server{spare("a"), voter("b"), voter("c")}, all("a", "b", "c"), nil, 3, 2, false},
		// The concurrent drains gossip has not shown yet.
		{"one spare, another voter's drain admitted", append(three, spare("d")), all("a", "b", "c", "d"), map[string]bool{"b": true}, 3, 2, true},
		{"two spares, another voter's drain admitted", append(three, spare("d"), spare("e")), all("a", "b", "c", "d", "e"), map[string]bool{"b": true}, 3, 3, false},
		{"the spare a draining voter needs", []raftstore.Server{spare("a"), voter("b"), voter("c"), voter("d")}, all("a", "b", "c", "d"), map[string]bool{"b": true}, 3, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left, short := DrainFloor(tt.servers, tt.members, tt.leaving, "a", tt.minQuorum)
			if left != tt.left || short != tt.short {
				t.Fatalf("DrainFloor = %d, %v; want %d, %v", left, short, tt.left, tt.short)
			}
		})
	}
}

// The leader decides admissions one at a time and counts the ones it
// admitted before gossip shows them: of two voters' drains with one spare,
// the second is refused (forced, admitted); a lease runs out, and a node
// that left the configuration no longer counts.
func TestAdmitDrain_CountsAdmittedDrains(t *testing.T) {
	now := time.Unix(1_000, 0)
	st := &configOnly{servers: []raftstore.Server{
		{ID: "n1", Voter: true}, {ID: "n2", Voter: true}, {ID: "n3", Voter: true}, {ID: "n4"},
	}}
	fm := newFakeMembers()
	for _, s := range st.servers {
		fm.set(membership.Member{ID: s.ID})
	}
	cfg := testConfig(t, "n1")
	cfg.MinQuorum, cfg.RaftVoters = 3, 3
	cfg.Now = func() time.Time { return now }
	r, err := NewReconciler(cfg, ReconcilerDeps{Store: st, Members: fm})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.AdmitDrain(ctx, "n1", false, time.Minute); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("admission on a follower: %v, want ErrNotLeader", err)
	}
	r.leading.Store(true)
	if _, err := r.AdmitDrain(ctx, "n1", false, time.Minute); err != nil {
		t.Fatalf("first drain: %v", err)
	}
	if _, err := r.AdmitDrain(ctx, "n1", false, time.Minute); err != nil {
		t.Fatalf("the same drain asked again: %v", err)
	}
	if _, err := r.AdmitDrain(ctx, "n2", false, time.Minute); !errors.Is(err, ErrDrainRefused) {
		t.Fatalf("second voter's drain with one spare: %v, want ErrDrainRefused", err)
	}
	if _, err := r.AdmitDrain(ctx, "n4", false, time.Minute); !errors.Is(err, ErrDrainRefused) {
		t.Fatalf("the spare's drain while a voter drains: %v, want ErrDrainRefused", err)
	}
	if _, err := r.AdmitDrain(ctx, "n2", true, time.Minute); err != nil {
		t.Fatalf("forced second drain: %v", err)
	}
	now = now.Add(time.Minute)
	r.drains.mu.Lock()
	delete(r.drains.leases, "n2") // the forced one is not under test here
	r.drains.mu.Unlock()
	if _, err := r.AdmitDrain(ctx, "n3", false, time.Minute); err != nil {
		t.Fatalf("drain after the first one's lease ran out: %v", err)
	}
	// n3 left; a new spare joined.
	st.servers = append(slices.DeleteFunc(st.servers, func(s raftstore.Server) bool { return s.ID == "n3" }), raftstore.Server{ID: "n5"})
	fm.remove("n3")
	fm.set(membership.Member{ID: "n5"})
	if _, err := r.AdmitDrain(ctx, "n2", false, time.Minute); err != nil {
		t.Fatalf("drain after the admitted node left the configuration: %v", err)
	}
	r.drains.mu.Lock()
	_, kept := r.drains.leases["n3"]
	r.drains.mu.Unlock()
	if kept {
		t.Fatal("the lease of a node no longer configured is kept")
	}
}

// configOnly is a RaftConfigurator whose configuration is all AdmitDrain
// reads.
type configOnly struct {
	RaftConfigurator
	servers []raftstore.Server
}

func (c *configOnly) Configuration(context.Context) ([]raftstore.Server, error) {
	return slices.Clone(c.servers), nil
}
