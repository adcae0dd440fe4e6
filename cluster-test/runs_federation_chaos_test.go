//go:build chaos

package clustertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestChaos_FederatedDebateRandomFaults runs twelve debates across dc1 and
// dc2, each hit in a random phase by one or two random faults: dc1's
// leader, a dc2 server or a dc1 follower killed (and restarted after the
// run), or the systems cut apart for up to 3 s (far below the round
// timeout). Every run ends with the undisturbed result, nobody eliminated.
func TestChaos_FederatedDebateRandomFaults(t *testing.T) {
	f := newFedDebate(t)
	dc1, dc2 := f.dc1, f.dc2
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	for r := range 12 {
		kp := killPhases[rng.IntN(len(killPhases))]
		reporter := fedParticipants[rng.IntN(len(fedParticipants))]
		rr := newRunRequestOf(t, fmt.Sprintf("req-fed-chaos-%d", r), reporter, runTaskTimeoutMs, fedParticipants)
		f.gate.arm(kp.phase)
		runID := f.obs.start(t, rr)
		f.gate.waitHeld(t, kp.tasks)
		var restart []func()
		down1, down2 := false, false // at most one node down per system: both keep a quorum
		for n := 1 + rng.IntN(2); n > 0; n-- {
			switch rng.IntN(4) {
			case 0:
				if down1 {
					continue
				}
				down1 = true
				l := dc1.Leader(t)
				t.Logf("run %d, %s: kill dc1's leader %s", r, kp.phase, l)
				dc1.Kill(t, l.Index)
				restart = append(restart, func() { dc1.Restart(t, l.Index) })
			case 1:
				if down2 {
					continue
				}
				down2 = true
				k := rng.IntN(3)
				t.Logf("run %d, %s: kill %s", r, kp.phase, dc2.Node(k))
				dc2.Kill(t, k)
				restart = append(restart, func() { dc2.Restart(t, k) })
			case 2:
				if down1 {
					continue
				}
				down1 = true
				fl := dc1.Followers(t)
				v := fl[rng.IntN(len(fl))]
				t.Logf("run %d, %s: kill dc1's follower %s", r, kp.phase, v)
				dc1.Kill(t, v.Index)
				restart = append(restart, func() { dc1.Restart(t, v.Index) })
			default:
				d := time.Duration(500+rng.IntN(2500)) * time.Millisecond
				t.Logf("run %d, %s: cut dc1 from dc2 for %v", r, kp.phase, d)
				dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
				time.Sleep(d) // the length of the cut is the scenario
				dc1.Net.Heal()
			}
		}
		f.gate.open()
		requireUndisturbedOutcome(t, f.obs.waitDone(t, runID), rr, personaScript(nil))
		for _, fn := range restart {
			fn()
		}
	}
	dc1.RequireInvariants(t)
	dc2.RequireInvariants(t)
}
