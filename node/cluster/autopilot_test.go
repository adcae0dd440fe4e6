package cluster

import (
	"context"
	"fmt"
	"strings"
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

func TestHealthChecker_Judge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LastContactThreshold = time.Second
	cfg.MaxTrailingLogs = 100
	h := newHealthChecker(cfg, nil)
	tests := []struct {
		name    string
		stats   map[string]string
		healthy bool
		reason  string
	}{
		{"current", map[string]string{"last_contact": "20ms", "last_log_index": "995"}, true, ""},
		{"never heard", map[string]string{"last_contact": "never", "last_log_index": "1000"}, false, "no contact"},
		{"silent", map[string]string{"last_contact": "3s", "last_log_index": "1000"}, false, "last contact 3s ago"},
		{"behind", map[string]string{"last_contact": "5ms", "last_log_index": "800"}, false, "200 log entries behind"},
		{"garbage", map[string]string{"last_contact": "soon"}, false, "no contact"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sh ServerHealth
			h.judge(&sh, tc.stats, 1000)
			if sh.Healthy != tc.healthy || !strings.Contains(sh.Reason, tc.reason) {
				t.Fatalf("judge = healthy %v reason %q, want %v %q", sh.Healthy, sh.Reason, tc.healthy, tc.reason)
			}
		})
	}
}

// check tracks since when each server has been healthy, across passes,
// and publishes the report with the failure tolerance.
func TestHealthChecker_StableSinceAndReport(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RaftVoters, cfg.MinQuorum = 3, 3
	fetch := fakeStats{"v2": {"last_contact": "10ms", "last_log_index": "50"}, "p1": {"last_contact": "10ms", "last_log_index": "50"}}
	h := newHealthChecker(cfg, fetch)
	in := planInput{self: "n1", now: t0,
		servers: []raftstore.Server{voter("n1"), voter("v2"), voter("v3"), nonvoter("p1")},
		members: views(alive("n1"), alive("v2"), with(alive("v3"), membership.StatusDead, t0), alive("p1"))}
	got := h.check(context.Background(), in, map[string]string{"last_log_index": "50"})
	if !got["v2"].Healthy || got["v3"].Healthy || !got["p1"].StableSince.Equal(t0) || !got["n1"].Leader {
		t.Fatalf("first pass: %+v", got)
	}
	in.now = t0.Add(time.Minute)
	got = h.check(context.Background(), in, map[string]string{"last_log_index": "50"})
	if !got["p1"].StableSince.Equal(t0) {
		t.Fatalf("p1 stable since %v, want %v (unchanged while healthy)", got["p1"].StableSince, t0)
	}
	rep, ok := h.latest()
	if !ok || rep.Healthy || rep.FailureTolerance != 0 || len(rep.Servers) != 4 || rep.TargetVoters != 3 {
		t.Fatalf("report %+v ok %v: want unhealthy, tolerance 0 (2 of 3 voters healthy)", rep, ok)
	}
	h.invalidate()
	if _, ok := h.latest(); ok {
		t.Fatal("report still valid after losing leadership")
	}
}

type fakeStats map[string]map[string]string

func (f fakeStats) RaftStats(_ context.Context, id string) (map[string]string, error) {
	if s, ok := f[id]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%s unreachable", id)
}
