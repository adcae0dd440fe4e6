package clustertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// TestPartition_MinorityCannotCommit cuts one node off (the leader, or a
// follower): writes through it must fail fast with a retryable 4000, the
// majority elects a leader if needed and keeps committing, and after the
// partition heals the minority catches up and accepts writes again.
func TestPartition_MinorityCannotCommit(t *testing.T) {
	tests := []struct {
		name          string
		isolateLeader bool
	}{
		{"leader in minority", true},
		{"follower in minority", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t, 3)
			l := c.Leader(t)
			minority := c.Followers(t)[0]
			if tt.isolateLeader {
				minority = l
			}
			majority := others(c.Running(), minority)
			system := map[string]any{"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}}
			minCl := c.Connect(t, minority.Index, system)
			majCl := c.Connect(t, majority[0].Index, system)
			if err := minCl.Register("min-before", nil); err != nil {
				t.Fatalf("write through %s before the partition: %s", minority, Describe(err))
			}

			c.Net.Partition(idsOf([]*Node{minority}), idsOf(majority))
			start := time.Now()
			err := minCl.Register("min-during", nil)
			took := time.Since(start)
			re := requireMAPError(t, err, rpc.CodeExhausted, true)
			t.Logf("write through the minority (%s) failed after %v: %s", minority, took, Describe(err))
			if took > UnavailableBound {
				t.Errorf("write through the minority took %v to fail, want <= %v", took, UnavailableBound)
			}
			// A follower that has not yet noticed the partition forwards to
			// the old leader, which never answers: it cannot know whether the
			// command was proposed, so it says "outcome_unknown"; one that has
			// noticed says "no_leader". Either way nothing committed (checked
			// by the invariants below) and the error came within the bound.
			if reason := re.Data.Details["reason"]; !tt.isolateLeader && reason != "no_leader" && reason != "outcome_unknown" {
				t.Errorf("minority follower's error: want details.reason no_leader or outcome_unknown, got %s", Describe(err))
			}

			c.LeaderAmong(t, majority...)
			for k := range 5 {
				if err := majCl.Register(fmt.Sprintf("maj-%d", k), nil); err != nil {
					t.Fatalf("majority write %d: %s", k, Describe(err))
				}
			}
			if err := minCl.Register("min-still", nil); err == nil {
				t.Fatal("minority committed a write while partitioned")
			}

			c.Net.Heal()
			c.Leader(t)
			k := 0
			Eventually(t, ConvergeTimeout, func() error {
				k++
				return minCl.Register(fmt.Sprintf("min-after-%d", k), nil)
			})
			c.RequireInvariants(t)
		})
	}
}
