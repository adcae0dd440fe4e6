//go:build chaos

package clustertest

import (
	"testing"
	"time"

	"github.com/concordmap/concord/cluster-test/wannet"
)

// TestChaos_WANCutsDownsAndKills is the long variant of
// TestWAN_FederationOverLossyLink: numbered streams flow both ways over a
// lossier link (5%) while, round after round, the link is blackholed or
// its interfaces are set down, and a server of each system is killed with
// SIGKILL and restarted. At the end every message answered delivered or
// queued has arrived, once, in order.
func TestChaos_WANCutsDownsAndKills(t *testing.T) {
	w, dc1, dc2 := wanPair(t)
	link := w.Link("dc1", "dc2")
	link.SetShape(wannet.Shape{Delay: WANShape.Delay, Jitter: WANShape.Jitter, Loss: 0.05})
	a, b := streamPlacement(t, dc1, dc2)
	alice := agentOn(t, dc1, a, "alice", nil)
	bob := agentOn(t, dc2, b, "bob", nil)
	sendDelivered(t, alice, "dc2:agent:bob", "hello")
	sendDelivered(t, bob, "dc1:agent:alice", "hello")
	ab := startSeqStream(alice, "dc2:agent:bob", bob, "a2b")
	ba := startSeqStream(bob, "dc1:agent:alice", alice, "b2a")

	const rounds = 4
	for r := range rounds {
		ab.waitMust(t, ab.mustCount()+10)
		if r%2 == 0 {
			link.Cut()
		} else if err := link.Down(); err != nil {
			t.Fatal(err)
		}
		// Kill a server in each system that holds neither agent, while
		// the link is out, then bring it back.
		v1, v2 := (a+1+r%2)%3, (b+1+r%2)%3
		dc1.Kill9(t, v1)
		dc2.Kill9(t, v2)
		time.Sleep(25 * time.Second) // an outage longer than the streams' silence limit is the scenario
		dc1.Restart(t, v1)
		dc2.Restart(t, v2)
		if r%2 == 0 {
			link.Restore()
		} else if err := link.Up(); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 2*ConvergeTimeout, func() error {
			if err := dc1.LinkUp(dc2); err != nil {
				return err
			}
			return dc2.LinkUp(dc1)
		})
		t.Logf("round %d: link %s and back, %s and %s restarted", r, map[bool]string{true: "cut", false: "down"}[r%2 == 0], dc1.Proc(v1), dc2.Proc(v2))
	}
	ab.waitMust(t, ab.mustCount()+10)
	ba.waitMust(t, ba.mustCount()+10)
	ab.stopAndVerify(t)
	ba.stopAndVerify(t)
	st := link.Stats()
	t.Logf("link: %d packets forwarded, %d dropped", st.Forwarded, st.Dropped)
}
