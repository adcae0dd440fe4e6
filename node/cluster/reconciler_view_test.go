package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// viewStore answers Configuration only; view calls nothing else.
type viewStore struct {
	RaftConfigurator
	servers []raftstore.Server
}

func (v viewStore) Configuration(context.Context) ([]raftstore.Server, error) { return v.servers, nil }

// countingSessions is a SessionReader over fixed sessions that records
// which homes' sessions were copied.
type countingSessions struct {
	SessionReader
	mu     sync.Mutex
	byHome map[string][]registry.Session
	asked  []string
}

func (c *countingSessions) ConnectedHomes() []string {
	homes := make([]string, 0, len(c.byHome))
	for h := range c.byHome {
		homes = append(homes, h)
	}
	slices.Sort(homes)
	return homes
}

func (c *countingSessions) ConnectedSessionsOn(node string) []registry.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, node)
	return c.byHome[node]
}

// TestReconcilerView_CopiesOnlyAwayHomes: every node reads the view each
// ReconcileInterval, so it must not copy the sessions of live homes (issue
// 10: a copy of all of them was a sixth of the CPU of a connect burst),
// yet must give plan every session of a home that is dead, left, or
// unknown to gossip.
func TestReconcilerView_CopiesOnlyAwayHomes(t *testing.T) {
	fm := newFakeMembers()
	fm.set(membership.Member{ID: "n1"})
	fm.set(membership.Member{ID: "n2"})
	fm.set(membership.Member{ID: "n3", Status: membership.StatusDead})
	fm.set(membership.Member{ID: "n4", Status: membership.StatusLeft})
	// n5 has sessions but gossip does not know it.
	sessions := &countingSessions{byHome: map[string][]registry.Session{}}
	for _, h := range []string{"n1", "n2", "n3", "n4", "n5"} {
		sessions.byHome[h] = []registry.Session{{ID: "s-" + h, HomeNode: h, Connected: true}}
	}
	store := viewStore{servers: []raftstore.Server{{ID: "n1", Voter: true}, {ID: "n2", Voter: true}, {ID: "n3", Voter: true}}}
	r, err := NewReconciler(testConfig(t, "n1"), ReconcilerDeps{Store: store, Members: fm, Sessions: sessions})
	if err != nil {
		t.Fatal(err)
	}
	in, err := r.view(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range in.sessions {
		got = append(got, s.ID)
	}
	if want := []string{"s-n3", "s-n4", "s-n5"}; !slices.Equal(got, want) {
		t.Fatalf("view sessions = %v, want %v", got, want)
	}
	if want := []string{"n3", "n4", "n5"}; !slices.Equal(sessions.asked, want) {
		t.Fatalf("copied the sessions of %v, want only %v", sessions.asked, want)
	}
	for _, h := range []string{"n1", "n2", "n3", "n4", "n5"} {
		if _, ok := in.members[h]; !ok {
			t.Errorf("members lacks home %s: its death would never be tracked", h)
		}
	}
}
