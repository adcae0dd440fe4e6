package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

func atLevel(m memberView, level int) memberView {
	m.fsmLevel = level
	return m
}

// A server whose build enforces an older FSM level than every configured
// server is not added (with or without a voter target); one at the
// system's level or above is, and a system with a server of unknown
// level (or one still on level 0) takes anyone.
func TestPlan_FSMLevelFloor(t *testing.T) {
	three := []raftstore.Server{voter("n1"), voter("n2"), voter("n3")}
	up := func(id string) memberView { return atLevel(alive(id), 1) }
	tests := []struct {
		name    string
		members map[string]memberView
		target  int
		want    string
	}{
		{"all at 1, old joiner refused", views(up("n1"), up("n2"), up("n3"), alive("n4")), 0, ""},
		{"all at 1, old joiner refused as non-voter", views(up("n1"), up("n2"), up("n3"), alive("n4")), 3, ""},
		{"all at 1, joiner at 1 added", views(up("n1"), up("n2"), up("n3"), up("n4")), 0, "add n4@n4:raft"},
		{"all at 1, newer joiner added", views(up("n1"), up("n2"), up("n3"), atLevel(alive("n4"), 2)), 3, "nonvoter n4@n4:raft"},
		{"mid-upgrade (one at 0), old joiner added", views(up("n1"), up("n2"), alive("n3"), alive("n4")), 0, "add n4@n4:raft"},
		{"configured server unknown to gossip, old joiner added", views(up("n1"), up("n2"), alive("n4")), 3, "nonvoter n4@n4:raft"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := planInput{self: "n1", servers: three, members: tc.members, now: t0, delay: delay, minQuo: 3, target: tc.target}
			if tc.target > 0 {
				in.health = map[string]ServerHealth{}
				for _, s := range three {
					in.health[s.ID] = ServerHealth{ID: s.ID, Healthy: true, StableSince: t0}
				}
			}
			if got := render(plan(in)); got != tc.want {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

// The refused server is logged once per level, not every pass, and again
// when its level changes; a server at the system's level is not logged.
func TestReconciler_WarnFSMLevelOnce(t *testing.T) {
	var buf bytes.Buffer
	r := &Reconciler{log: slog.New(slog.NewTextHandler(&buf, nil)), lowLevel: map[string]int{}}
	three := []raftstore.Server{voter("n1"), voter("n2"), voter("n3")}
	up := func(id string) memberView { return atLevel(alive(id), 2) }
	in := planInput{servers: three, members: views(up("n1"), up("n2"), up("n3"), alive("n4"), up("n5"))}
	r.warnFSMLevel(in)
	r.warnFSMLevel(in)
	if n := strings.Count(buf.String(), "server refused"); n != 1 || !strings.Contains(buf.String(), "peer=n4") {
		t.Fatalf("want one line about n4, got:\n%s", buf.String())
	}
	in.members["n4"] = atLevel(alive("n4"), 1)
	r.warnFSMLevel(in)
	if n := strings.Count(buf.String(), "server refused"); n != 2 {
		t.Fatalf("want a second line for the new level, got:\n%s", buf.String())
	}
}

// The leader records the level every configured server advertises once
// it reaches registry.FSMLevelSystemRecord (every server then knows the
// record's command type) and exceeds the recorded one, never above its
// own build; a recorded level also refuses joiners below it, even while
// a configured server is unknown to gossip.
func TestPlan_RecordFSMLevel(t *testing.T) {
	rec, mod := registry.FSMLevelSystemRecord, registry.FSMLevelModuleSessionWrites
	three := []raftstore.Server{voter("n1"), voter("n2"), voter("n3")}
	at := func(l int, ids ...string) map[string]memberView {
		var ms []memberView
		for _, id := range ids {
			ms = append(ms, atLevel(alive(id), l))
		}
		return views(ms...)
	}
	tests := []struct {
		name     string
		members  map[string]memberView
		recorded int
		build    int
		level    int
		record   bool
	}{
		{"all below the record's level", at(rec-1, "n1", "n2", "n3"), 0, rec, rec - 1, false},
		{"one below the record's level (mid-upgrade)", func() map[string]memberView {
			m := at(rec, "n1", "n2")
			m["n3"] = atLevel(alive("n3"), rec-1)
			return m
		}(), 0, rec, rec - 1, false},
		{"all at the record's level", at(rec, "n1", "n2", "n3"), 0, rec, rec, true},
		{"recorded already", at(rec, "n1", "n2", "n3"), rec, rec, rec, false},
		{"servers ahead of the leader's build", at(rec+1, "n1", "n2", "n3"), rec, rec, rec, false},
		{"a configured server unknown to gossip", at(rec, "n1", "n2"), 0, rec, 0, false},
		// A newer level moves the record up once every server advertises it.
		{"all at a newer level", at(mod, "n1", "n2", "n3"), rec, mod, mod, true},
		{"one still at the record's level", func() map[string]memberView {
			m := at(mod, "n1", "n2")
			m["n3"] = atLevel(alive("n3"), rec)
			return m
		}(), rec, mod, rec, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := planInput{self: "n1", servers: three, members: tc.members, recorded: tc.recorded}
			level, ok := levelToRecord(in, tc.build)
			if level != tc.level || ok != tc.record {
				t.Fatalf("levelToRecord = %d, %v; want %d, %v", level, ok, tc.level, tc.record)
			}
		})
	}
	members := at(rec, "n1", "n2")
	members["n4"] = atLevel(alive("n4"), rec-1)
	in := planInput{self: "n1", servers: three, members: members, now: t0, delay: delay, minQuo: 3, recorded: rec}
	if got := render(plan(in)); got != "" {
		t.Fatalf("plan with a recorded level %d and a joiner below it = %q, want nothing", rec, got)
	}
}
