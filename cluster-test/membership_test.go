package clustertest

import (
	"fmt"
	"testing"
	"time"
)

// TestMembership_JoinAndLeave adds a fourth server (gossip join, no
// bootstrap-expect: the leader's reconciler makes it a voter), then has an
// original follower leave gracefully (removed from the Raft configuration
// at once), then removes the added server by hand, and checks the cluster
// keeps committing through every change.
func TestMembership_JoinAndLeave(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	cl := c.Connect(t, l.Index, map[string]any{"participantType": "system"})
	write := func(tag string) {
		t.Helper()
		if err := cl.Register(tag, nil); err != nil {
			t.Fatalf("write %s: %s", tag, Describe(err))
		}
	}
	write("before-join")

	n4 := c.AddNode(t)
	requireVoters(t, c, c.Leader(t), idsOf(c.Running()))
	write("after-join")
	// The new server catches up with the log, including what was written
	// before it joined.
	c.WaitApplied(t, c.Leader(t).Store().AppliedIndex())
	c.RequireConverged(t)
	if _, ok := n4.Server().Registry().Agent("before-join"); !ok {
		t.Fatalf("%s lacks an agent written before it joined", n4)
	}

	// Leave a follower that is not the client's node.
	var leaver *Node
	for _, f := range c.Followers(t) {
		if f != l && f != n4 {
			leaver = f
			break
		}
	}
	if leaver == nil {
		t.Fatal("no original follower to leave")
	}
	c.Leave(t, leaver.Index)
	l = c.Leader(t)
	requireVoters(t, c, l, idsOf(c.Running()))
	write("after-leave")

	// An operator removes the added server by hand (stop, then remove the
	// peer): two voters remain and still commit.
	c.Remove(t, n4.Index)
	l = c.Leader(t)
	requireVoters(t, c, l, idsOf(c.Running()))
	write("after-remove")
	c.RequireInvariants(t)
}

// TestMembership_DeadServerCleanupKeepsQuorum kills servers of a 4-server
// cluster one after the other: the first dead one is removed from the Raft
// configuration after the cleanup delay (4 -> 3 voters), the second is not
// (that would leave 2, below MinQuorum 3), so the cluster still has a
// quorum of the three configured voters; the second comes back on restart.
func TestMembership_DeadServerCleanupKeepsQuorum(t *testing.T) {
	c := New(t, 4)
	l := c.Leader(t)
	requireVoters(t, c, l, idsOf(c.Nodes()))

	victims := others(c.Running(), l)
	first, second := victims[0], victims[1]
	c.Kill(t, first.Index)
	requireVoters(t, c, c.Leader(t), idsOf(c.Running()))
	t.Logf("%s removed from the raft configuration", first)

	c.Kill(t, second.Index)
	want := idsOf(append(c.Running(), second))
	// Let the cleanup delay pass several times over: the dead server must
	// stay a voter all along.
	deadline := time.Now().Add(3 * DeadServerCleanupDelay)
	for time.Now().Before(deadline) {
		requireVoters(t, c, c.Leader(t), want)
		time.Sleep(200 * time.Millisecond) // waiting for a removal that must not happen
	}

	cl := c.Connect(t, c.Leader(t).Index, map[string]any{"participantType": "system"})
	for k := range 3 {
		if err := cl.Register(fmt.Sprintf("with-one-dead-%d", k), nil); err != nil {
			t.Fatalf("write with %s dead: %s", second, Describe(err))
		}
	}
	c.Restart(t, second.Index)
	requireVoters(t, c, c.Leader(t), want)
	c.RequireInvariants(t)
}
