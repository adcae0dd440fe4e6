//go:build chaos

package clustertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Long scenarios, built only with -tags chaos (make chaos).

// TestChaos_RepeatedLeaderKills kills the leader ten times in a row (and
// restarts it) while the linearizability workload runs on every node.
func TestChaos_RepeatedLeaderKills(t *testing.T) {
	c := New(t, 3)
	w := newLinWorkload(c, 4)
	stop := w.run(t, []int{0, 1, 2, 0, 1, 2})
	for round := range 10 {
		time.Sleep(500 * time.Millisecond) // the workload runs between faults
		l := c.Leader(t)
		t.Logf("round %d: kill leader %s", round, l)
		c.Kill(t, l.Index)
		time.Sleep(time.Second) // the workload runs against the survivors
		c.Restart(t, l.Index)
	}
	stop()
	w.check(t)
	c.RequireInvariants(t)
	t.Logf("leaders per term: %v", c.Terms())
}

// TestChaos_PartitionFlapping partitions a five-node cluster at random
// (minority/majority splits, isolations, slow links) twenty times while
// the linearizability workload runs.
func TestChaos_PartitionFlapping(t *testing.T) {
	c := New(t, 5)
	w := newLinWorkload(c, 4)
	stop := w.run(t, []int{0, 1, 2, 3, 4})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	ids := idsOf(c.Nodes())
	for round := range 20 {
		perm := rng.Perm(len(ids))
		switch rng.IntN(3) {
		case 0:
			a, b := []string{ids[perm[0]], ids[perm[1]]}, []string{ids[perm[2]], ids[perm[3]], ids[perm[4]]}
			t.Logf("round %d: partition %v | %v", round, a, b)
			c.Net.Partition(a, b)
		case 1:
			t.Logf("round %d: isolate %s", round, ids[perm[0]])
			c.Net.Isolate(ids[perm[0]])
		default:
			t.Logf("round %d: 50 ms between %s and %s", round, ids[perm[0]], ids[perm[1]])
			c.Net.Delay(ids[perm[0]], ids[perm[1]], 50*time.Millisecond)
			c.Net.Delay(ids[perm[1]], ids[perm[0]], 50*time.Millisecond)
		}
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond) // the fault lasts a while
		c.Net.Heal()
		time.Sleep(500 * time.Millisecond) // and the cluster recovers a while
	}
	stop()
	c.Leader(t)
	w.check(t)
	c.RequireInvariants(t)
}

// TestChaos_ProcsRepeatedLeaderKills kill -9s the leader process ten
// times, restarting it each time, writing through the survivors; every
// acknowledged write must be on every node at the end.
func TestChaos_ProcsRepeatedLeaderKills(t *testing.T) {
	pc := StartProcs(t, 3)
	var acked []string
	system := map[string]any{"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}}
	for round := range 10 {
		l := pc.Leader(t)
		var survivor *Proc
		for _, p := range pc.Running() {
			if p != l {
				survivor = p
			}
		}
		cl := pc.Connect(t, survivor.Index, system)
		pc.Kill9(t, l.Index)
		start := time.Now()
		k := 0
		Eventually(t, LeaderTimeout, func() error {
			k++
			id := fmt.Sprintf("r%d-%d", round, k)
			err := cl.Register(id, nil)
			if err == nil {
				acked = append(acked, id)
			}
			return err
		})
		t.Logf("round %d: killed %s, first write after %v", round, l, time.Since(start))
		pc.Restart(t, l.Index)
		cl.Close()
	}
	pc.Leader(t)
	requireProcAgents(t, pc, acked)
}
