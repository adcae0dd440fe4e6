package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

var t0 = time.Unix(1_750_000_000, 0)

const delay = 30 * time.Second

func voter(id string) raftstore.Server {
	return raftstore.Server{ID: id, Address: id + ":raft", Voter: true}
}

func alive(id string) memberView {
	return memberView{id: id, raftAddr: id + ":raft", server: true, status: membership.StatusAlive, since: t0}
}

func with(m memberView, st membership.Status, since time.Time) memberView {
	m.status, m.since = st, since
	return m
}

func views(ms ...memberView) map[string]memberView {
	out := map[string]memberView{}
	for _, m := range ms {
		out[m.id] = m
	}
	return out
}

func session(id, home string, connected bool) registry.Session {
	return registry.Session{ID: id, HomeNode: home, Connected: connected}
}

// render prints actions compactly for comparison.
func render(as []action) string {
	var parts []string
	for _, a := range as {
		switch a.kind {
		case actAddVoter:
			parts = append(parts, fmt.Sprintf("add %s@%s", a.id, a.addr))
		case actRemove:
			parts = append(parts, "remove "+a.id)
		case actDetach:
			parts = append(parts, fmt.Sprintf("detach %s(%s)", a.session, a.id))
		case actAddNonvoter:
			parts = append(parts, fmt.Sprintf("nonvoter %s@%s", a.id, a.addr))
		case actDemote:
			parts = append(parts, "demote "+a.id)
		}
	}
	return strings.Join(parts, "; ")
}

func TestPlan(t *testing.T) {
	late := t0.Add(delay)        // the delay has just passed
	early := t0.Add(delay - 1e9) // one second short
	three := []raftstore.Server{voter("n1"), voter("n2"), voter("n3")}
	tests := []struct {
		name     string
		servers  []raftstore.Server
		members  map[string]memberView
		sessions []registry.Session
		now      time.Time
		minQuo   int
		want     string
	}{
		{"steady state", three, views(alive("n1"), alive("n2"), alive("n3")), nil, late, 3, ""},
		{"new server becomes voter", three, views(alive("n1"), alive("n2"), alive("n3"), alive("n4")), nil, t0, 3, "add n4@n4:raft"},
		{"non-voter promoted", []raftstore.Server{voter("n1"), {ID: "n2", Address: "n2:raft"}}, views(alive("n1"), alive("n2")), nil, t0, 3, "add n2@n2:raft"},
		{"moved server re-added at its new address", []raftstore.Server{voter("n1"), {ID: "n2", Address: "old", Voter: true}}, views(alive("n1"), alive("n2")), nil, t0, 3, "add n2@n2:raft"},
		{"member without raft address ignored", three, views(alive("n1"), alive("n2"), alive("n3"), memberView{id: "x", server: true, status: membership.StatusAlive}), nil, t0, 3, ""},
		{"non-server member ignored", three, views(alive("n1"), alive("n2"), alive("n3"), memberView{id: "c", raftAddr: "c:raft", status: membership.StatusAlive}), nil, t0, 3, ""},
		{"dead member not added", three, views(alive("n1"), alive("n2"), alive("n3"), with(alive("n4"), membership.StatusDead, t0)), nil, late, 3, ""},
		{"left removed at once even below min quorum", three, views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusLeft, t0)), nil, t0, 3, "remove n3"},
		{"dead kept before the delay", four(), views(alive("n1"), alive("n2"), alive("n3"), with(alive("n4"), membership.StatusDead, t0)), nil, early, 3, ""},
		{"dead removed after the delay", four(), views(alive("n1"), alive("n2"), alive("n3"), with(alive("n4"), membership.StatusDead, t0)), nil, late, 3, "remove n4"},
		{"dead kept when removal goes below min quorum", three, views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusDead, t0)), nil, late, 3, ""},
		{"min quorum 2 allows 3 to 2", three, views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusDead, t0)), nil, late, 2, "remove n3"},
		{"two dead, only one fits min quorum", four(), views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusDead, t0), with(alive("n4"), membership.StatusDead, t0)), nil, late, 3, "remove n3"},
		{"a joining server makes room for a removal", three, views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusDead, t0), alive("n4")), nil, late, 3, "add n4@n4:raft; remove n3"},
		{"unknown to gossip counts as dead", four(), views(alive("n1"), alive("n2"), alive("n3"), memberView{id: "n4", since: t0}), nil, late, 3, "remove n4"},
		{"unknown without a since is never removed", four(), views(alive("n1"), alive("n2"), alive("n3")), nil, late, 3, ""},
		{"dead non-voter removed regardless of quorum", []raftstore.Server{voter("n1"), {ID: "n2", Address: "n2:raft"}}, views(alive("n1"), with(alive("n2"), membership.StatusDead, t0)), nil, late, 3, "remove n2"},
		{"self never removed", three, views(with(alive("n1"), membership.StatusLeft, t0), alive("n2"), alive("n3")), nil, late, 1, ""},
		{"sessions of a dead node detached at once", three, views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusDead, t0)),
			[]registry.Session{session("s1", "n3", true), session("s2", "n2", true), session("s3", "n3", false), session("s4", "", false)}, t0, 3, "detach s1(n3)"},
		{"sessions of a left node detached", three, views(alive("n1"), alive("n2"), with(alive("n3"), membership.StatusLeft, t0)),
			[]registry.Session{session("s1", "n3", true)}, t0, 3, "remove n3; detach s1(n3)"},
		{"sessions of an unknown node wait for the delay", three, views(alive("n1"), alive("n2"), alive("n3"), memberView{id: "n9", since: t0}),
			[]registry.Session{session("s1", "n9", true)}, early, 3, ""},
		{"sessions of an unknown node detached after the delay", three, views(alive("n1"), alive("n2"), alive("n3"), memberView{id: "n9", since: t0}),
			[]registry.Session{session("s1", "n9", true)}, late, 3, "detach s1(n9)"},
		{"own sessions never detached", three, views(with(alive("n1"), membership.StatusDead, t0), alive("n2"), alive("n3")),
			[]registry.Session{session("s1", "n1", true)}, late, 3, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := render(plan(planInput{self: "n1", servers: tc.servers, members: tc.members, sessions: tc.sessions, now: tc.now, delay: delay, minQuo: tc.minQuo}))
			if got != tc.want {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

func four() []raftstore.Server {
	return []raftstore.Server{voter("n1"), voter("n2"), voter("n3"), voter("n4")}
}

func TestTracker_SinceFollowsStatusChanges(t *testing.T) {
	tr := newTracker()
	m := func(id string, st membership.Status) membership.Member {
		return membership.Member{ID: id, Status: st, NodeMeta: membership.NodeMeta{Role: membership.RoleServer, RaftAddr: id}}
	}
	v := tr.update([]membership.Member{m("a", membership.StatusAlive)}, []string{"a", "ghost"}, t0)
	if v["a"].since != t0 || v["ghost"].status != statusUnknown || v["ghost"].since != t0 {
		t.Fatalf("first update: %+v", v)
	}
	t1 := t0.Add(time.Minute)
	v = tr.update([]membership.Member{m("a", membership.StatusDead)}, []string{"a", "ghost"}, t1)
	if v["a"].since != t1 || v["ghost"].since != t0 {
		t.Fatalf("a died at t1, ghost unknown since t0: %+v", v)
	}
	t2 := t1.Add(time.Minute)
	v = tr.update([]membership.Member{m("a", membership.StatusDead)}, nil, t2)
	if v["a"].since != t1 {
		t.Fatalf("a dead since t1 still: %+v", v)
	}
	if _, ok := v["ghost"]; ok {
		t.Fatal("ghost no longer of interest but still tracked")
	}
	v = tr.update(nil, []string{"ghost"}, t2)
	if v["ghost"].since != t2 {
		t.Fatalf("ghost forgotten and seen again counts from t2: %+v", v)
	}
	if len(v) != 1 {
		t.Fatalf("tracked %v, want only ghost", v)
	}
}
