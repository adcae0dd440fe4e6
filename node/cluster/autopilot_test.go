package cluster

import (
	"testing"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
)

func nonvoter(id string) raftstore.Server { return raftstore.Server{ID: id, Address: id + ":raft"} }

// healthy reports id healthy since since, trailing by trailing entries.
func healthy(id string, since time.Time, trailing uint64) ServerHealth {
	return ServerHealth{ID: id, Healthy: true, StableSince: since, TrailingLogs: trailing}
}

func sick(id string) ServerHealth { return ServerHealth{ID: id, Reason: "gossip: dead"} }

func healthOf(hs ...ServerHealth) map[string]ServerHealth {
	out := map[string]ServerHealth{}
	for _, h := range hs {
		out[h.ID] = h
	}
	return out
}

func TestPlan_Autopilot(t *testing.T) {
	const stable = 10 * time.Second
	now := t0.Add(time.Minute)
	old, fresh := t0, now.Add(-time.Second) // stable for a minute; for a second
	dead := with(alive("v3"), membership.StatusDead, now)
	threePlusTwo := []raftstore.Server{voter("v1"), voter("v2"), voter("v3"), nonvoter("p1"), nonvoter("p2")}
	tests := []struct {
		name    string
		servers []raftstore.Server
		members map[string]memberView
		health  map[string]ServerHealth
		minQuo  int
		want    string
	}{
		{"steady", threePlusTwo, views(alive("v1"), alive("v2"), alive("v3"), alive("p1"), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", old, 0), healthy("p1", old, 0), healthy("p2", old, 0)), 3, ""},
		{"new server joins as non-voter", threePlusTwo, views(alive("v1"), alive("v2"), alive("v3"), alive("p1"), alive("p2"), alive("p3")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", old, 0)), 3, "nonvoter p3@p3:raft"},
		{"mismatched raft-voters not added", threePlusTwo,
			views(alive("v1"), alive("v2"), alive("v3"), alive("p1"), alive("p2"), func() memberView { m := alive("x"); m.raftVoters = 5; return m }()),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", old, 0)), 3, ""},
		{"dead voter: healthiest non-voter promoted", threePlusTwo, views(alive("v1"), alive("v2"), dead, alive("p1"), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), sick("v3"), healthy("p1", old, 7), healthy("p2", old, 2)), 3, "add p2@p2:raft"},
		{"tie on trailing: longest stable first", threePlusTwo, views(alive("v1"), alive("v2"), dead, alive("p1"), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), sick("v3"), healthy("p1", old.Add(time.Second), 0), healthy("p2", old, 0)), 3, "add p2@p2:raft"},
		{"unstable non-voter not promoted", threePlusTwo, views(alive("v1"), alive("v2"), dead, alive("p1"), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), sick("v3"), healthy("p1", fresh, 0), sick("p2")), 3, ""},
		{"draining non-voter not promoted", threePlusTwo,
			views(alive("v1"), alive("v2"), dead, func() memberView { m := alive("p1"); m.draining = true; return m }(), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), sick("v3"), healthy("p1", old, 0), healthy("p2", old, 5)), 3, "add p2@p2:raft"},
		{"voter back: most recently healthy extra demoted", []raftstore.Server{voter("v1"), voter("v2"), voter("v3"), voter("p1"), nonvoter("p2")},
			views(alive("v1"), alive("v2"), alive("v3"), alive("p1"), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", fresh, 0), healthy("p1", old.Add(time.Second), 0), healthy("p2", old, 0)), 3, "demote v3"},
		{"leader never demoted", []raftstore.Server{voter("n1"), voter("v2"), voter("v3"), voter("v4")},
			views(alive("n1"), alive("v2"), alive("v3"), alive("v4")),
			healthOf(healthy("n1", now, 0), healthy("v2", old, 0), healthy("v3", old, 0), healthy("v4", old, 0)), 3, "demote v4"},
		{"draining voter demoted once replaced", []raftstore.Server{voter("v1"), voter("v2"), voter("v3"), voter("p1")},
			views(alive("v1"), alive("v2"), func() memberView { m := alive("v3"); m.draining = true; return m }(), alive("p1")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", old, 0), healthy("p1", old, 0)), 3, "demote v3"},
		{"draining voter: replacement first", threePlusTwo,
			views(alive("v1"), alive("v2"), func() memberView { m := alive("v3"); m.draining = true; return m }(), alive("p1"), alive("p2")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", old, 0), healthy("p1", old, 0), healthy("p2", old, 0)), 3, "add p1@p1:raft; demote v3"},
		{"never below min quorum", []raftstore.Server{voter("v1"), voter("v2"), voter("v3"), voter("v4"), voter("v5")},
			views(alive("v1"), alive("v2"), alive("v3"), alive("v4"), alive("v5")),
			healthOf(healthy("v1", old, 0), healthy("v2", old, 0), healthy("v3", old, 0), healthy("v4", old, 0), healthy("v5", old, 0)), 5, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := planInput{self: "n1", servers: tc.servers, members: tc.members, now: now, delay: delay, minQuo: tc.minQuo,
				target: 3, health: tc.health, stable: stable}
			if got := render(plan(in)); got != tc.want {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFailureTolerance(t *testing.T) {
	for _, tc := range []struct{ voters, healthy, want int }{{3, 3, 1}, {3, 2, 0}, {4, 3, 0}, {5, 5, 2}, {5, 3, 0}, {1, 1, 0}, {0, 0, 0}} {
		if got := failureTolerance(tc.voters, tc.healthy); got != tc.want {
			t.Errorf("failureTolerance(%d, %d) = %d, want %d", tc.voters, tc.healthy, got, tc.want)
		}
	}
}
