package cluster

import (
	"testing"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// TestPlan_SessionDetachGrace feeds gossip observations through the
// tracker at fake-clock times, as the reconciler's passes do, and checks
// whether the last pass detaches n3's session and when the leader's loop
// is told to wake for it.
func TestPlan_SessionDetachGrace(t *testing.T) {
	const grace = 3 * time.Second
	type obs struct {
		at     time.Duration // since t0
		status membership.Status
		boot   string
	}
	at := func(d time.Duration, st membership.Status) obs { return obs{d, st, "b1"} }
	dead, up, left := membership.StatusDead, membership.StatusAlive, membership.StatusLeft
	three := []raftstore.Server{voter("n1"), voter("n2"), voter("n3")}
	tests := []struct {
		name     string
		servers  []raftstore.Server
		seen     []obs
		want     string
		wantWake time.Duration // 0: no detach pending
	}{
		{"failed for less than the grace", three, []obs{at(0, up), at(time.Second, dead), at(3*time.Second, dead)}, "", time.Second},
		{"failed for exactly the grace", three, []obs{at(0, dead), at(grace, dead)}, "detach s1(n3)", 0},
		{"failed for longer than the grace", three, []obs{at(0, dead), at(10*time.Second, dead)}, "detach s1(n3)", 0},
		{"flapped back: the grace starts over", three,
			[]obs{at(0, dead), at(2*time.Second, up), at(2500*time.Millisecond, dead), at(4*time.Second, dead)}, "", 1500 * time.Millisecond},
		{"flapped back, then failed for the grace", three,
			[]obs{at(0, dead), at(2*time.Second, up), at(2500*time.Millisecond, dead), at(5500*time.Millisecond, dead)}, "detach s1(n3)", 0},
		{"restarted (new boot) while failed: the grace starts over", three,
			[]obs{at(0, dead), obs{2 * time.Second, dead, "b2"}, obs{4 * time.Second, dead, "b2"}}, "", time.Second},
		{"alive again", three, []obs{at(0, dead), at(10*time.Second, up)}, "", 0},
		{"left: detached at once", three, []obs{at(0, up), at(time.Second, left)}, "remove n3; detach s1(n3)", 0},
		{"failed server no longer configured: detached at once", three[:2], []obs{at(0, up), at(time.Second, dead)}, "detach s1(n3)", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			var in planInput
			for _, o := range tc.seen {
				members := []membership.Member{
					{ID: "n1", Status: up, NodeMeta: membership.NodeMeta{Role: membership.RoleServer, RaftAddr: "n1:raft"}},
					{ID: "n2", Status: up, NodeMeta: membership.NodeMeta{Role: membership.RoleServer, RaftAddr: "n2:raft"}},
					{ID: "n3", Status: o.status, BootID: o.boot, NodeMeta: membership.NodeMeta{Role: membership.RoleServer, RaftAddr: "n3:raft"}},
				}
				now := t0.Add(o.at)
				in = planInput{self: "n1", servers: tc.servers, sessions: []registry.Session{session("s1", "n3", true)},
					now: now, delay: delay, minQuo: 1, grace: grace, members: tr.update(members, []string{"n1", "n2", "n3"}, now)}
			}
			if got := render(plan(in)); got != tc.want {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
			var wake time.Duration
			if next := nextDetach(in); !next.IsZero() {
				wake = next.Sub(in.now)
			}
			if wake != tc.wantWake {
				t.Fatalf("wake in %s, want %s", wake, tc.wantWake)
			}
		})
	}
}
