//go:build chaos

package clustertest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// TestChaos_FederationPartitions sends a numbered stream from dc1 to dc2
// while the systems are cut apart and healed again and again, and a dc2
// server is killed and restarted. Every send that answered delivered or
// queued arrives exactly once; a send whose outcome was unknown (5000:
// the link broke before the ack) arrives at most once; bob sees the
// stream in order.
func TestChaos_FederationPartitions(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	alice := agentOn(t, dc1, 0, "alice", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)
	side1, side2 := dc1.NodeIDs(), dc2.NodeIDs()

	const rounds, perRound = 6, 40
	var must, may []int
	seq := 0
	for r := range rounds {
		for i := range perRound {
			switch {
			case i == perRound/3 && r%2 == 0:
				dc1.Net.Partition(side1, side2)
			case i == perRound/3:
				dc2.Kill(t, 2) // never bob's node (1)
			case i == 2*perRound/3 && r%2 == 0:
				dc1.Net.Heal()
			case i == 2*perRound/3:
				dc2.Restart(t, 2)
			}
			res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": seq}})
			var re *rpc.Error
			switch {
			case err == nil && (len(res.Delivered) == 1 || len(res.Queued) == 1):
				must = append(must, seq)
			case errors.As(err, &re) && re.Code == rpc.CodeFederationUnavailable:
				may = append(may, seq)
			default:
				t.Fatalf("send %d: %v %s", seq, res, Describe(err))
			}
			seq++
			time.Sleep(20 * time.Millisecond) // traffic spread over the faults is the scenario
		}
	}
	dc1.Net.Heal()
	Eventually(t, 30*time.Second, func() error {
		got := received(t, bob)
		for _, s := range must {
			if !slices.Contains(got, s) {
				return errors.New("missing acknowledged message")
			}
		}
		return nil
	})
	time.Sleep(time.Second) // late duplicates would arrive now
	got := received(t, bob)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("out of order or duplicated: %d after %d", got[i], got[i-1])
		}
	}
	for _, s := range got {
		if !slices.Contains(must, s) && !slices.Contains(may, s) {
			t.Fatalf("received %d that was never sent", s)
		}
	}
	t.Logf("sent %d: %d acknowledged or queued, %d unknown; received %d", seq, len(must), len(may), len(got))
}

// TestChaos_FederationGuaranteed sends a numbered stream of guaranteed
// messages from dc1 to dc2 while the systems are cut apart and healed,
// dc1's leader (the outbox drainer) is killed and restarted, and a dc2
// server is killed and restarted. Every send that answered delivered or
// queued arrives exactly once, one whose outcome was unknown (5000) at
// most once, all in order, and dc1's outbox empties.
func TestChaos_FederationGuaranteed(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	alice := agentOn(t, dc1, 0, "alice", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)
	side1, side2 := dc1.NodeIDs(), dc2.NodeIDs()

	const rounds, perRound = 6, 24
	killed := -1
	must, may := sendGuaranteed(t, alice, "bob", 0, rounds*perRound, func(i int) {
		r, k := i/perRound, i%perRound
		switch {
		case k == perRound/3 && r%3 == 0:
			dc1.Net.Partition(side1, side2)
		case k == perRound/3 && r%3 == 1:
			if l := dc1.Leader(t); l.Index != 0 { // never alice's node
				killed = l.Index
				dc1.Kill(t, killed)
			}
		case k == perRound/3:
			dc2.Kill(t, 2) // never bob's node (1)
		case k == 2*perRound/3 && r%3 == 0:
			dc1.Net.Heal()
		case k == 2*perRound/3 && r%3 == 1:
			if killed >= 0 {
				dc1.Restart(t, killed)
				killed = -1
			}
		case k == 2*perRound/3:
			dc2.Restart(t, 2)
		}
		time.Sleep(20 * time.Millisecond) // traffic spread over the faults is the scenario
	})
	dc1.Net.Heal()
	got := onceInOrder(t, bob, must, may)
	outboxDepth(t, dc1, "dc2", 0)
	t.Logf("sent %d: %d delivered or queued, %d unknown; received %d", rounds*perRound, len(must), len(may), len(got))
}
