package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/node/membership"
)

func TestLeaderConfiguration(t *testing.T) {
	nodes, res := newTestCluster(t, 3, true)
	leader, followers := leaderOf(t, nodes)
	asker, other := followers[0], followers[1]
	all := []string{nodes[0].id, nodes[1].id, nodes[2].id}

	// unreachable maps the leader to a port nobody listens on.
	unreachable := newResolver(other.id, other.srv.addr, leader.id, listenAndClose(t))
	cases := []struct {
		name    string
		members map[string]membership.Status
		res     *staticResolver
		want    []string // nil: an error
	}{
		{name: "leader and follower alive", members: map[string]membership.Status{leader.id: membership.StatusAlive, other.id: membership.StatusAlive}, res: res, want: all},
		{name: "only a follower in gossip: followed to the leader", members: map[string]membership.Status{other.id: membership.StatusAlive}, res: res, want: all},
		{name: "leader unreachable: the follower's view", members: map[string]membership.Status{leader.id: membership.StatusAlive, other.id: membership.StatusAlive}, res: unreachable, want: all},
		{name: "no live peer", members: map[string]membership.Status{leader.id: membership.StatusDead, other.id: membership.StatusLeft}, res: res},
		{name: "no address", members: map[string]membership.Status{"ghost": membership.StatusAlive}, res: res},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fm := newFakeMembers()
			fm.set(membership.Member{ID: asker.id, Status: membership.StatusAlive})
			for id, st := range tc.members {
				fm.set(membership.Member{ID: id, Status: st})
			}
			srv := startServer(t, testConfig(t, asker.id), ServerDeps{Store: asker.store, Resolver: tc.res, Members: fm}, nil)
			ids, err := srv.LeaderConfiguration(testCtx(t), 2*time.Second)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("got %v, want an error", ids)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(ids)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(ids, want) {
				t.Fatalf("got %v, want %v", ids, want)
			}
		})
	}
}

// listenAndClose returns a loopback address nothing listens on any more.
func listenAndClose(t *testing.T) string {
	lis := listen(t, "")
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
