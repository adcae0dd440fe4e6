//go:build linux

package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestProcs_NonvoterKill9UnsyncedLog: non-voters write their Raft log
// without fsync (raftstore, nvsync.go), so one killed with -9 under writes
// left its log unsynced. Restarted, it sets that log aside, starts from its
// snapshots, catches up from the leader, and lists every acknowledged
// write, as does every other server; writes through the voters go on
// across the kills.
func TestProcs_NonvoterKill9UnsyncedLog(t *testing.T) {
	pc := StartProcs(t, 5, WithProcArgs(func(int) []string { return []string{"--raft-voters", "3"} }))
	var voters []int
	Eventually(t, MembershipTimeout, func() error {
		var err error
		voters, err = procVoters(pc, 5)
		return err
	})
	var nonvoter *Proc
	for i, p := range pc.Procs() {
		if !slices.Contains(voters, i) {
			nonvoter = p
		}
	}
	system := map[string]any{"participantType": "system"}
	var (
		mu    sync.Mutex
		acked []string
		fails atomic.Int64
		wg    sync.WaitGroup
	)
	// Each round hands out a budget of writes (map/agents/list, which the
	// check reads, returns up to 1000 agents).
	const perRound = 200
	budget := make(chan struct{}, perRound)
	stop := make(chan struct{})
	for w := range 4 {
		cl := pc.Connect(t, voters[w%len(voters)], system)
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-budget:
				}
				id := fmt.Sprintf("w%d-%d", w, k)
				if err := cl.Register(id, nil); err != nil {
					fails.Add(1)
					continue
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	ackedNow := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	for round := range 4 {
		before := ackedNow()
		for range perRound {
			budget <- struct{}{}
		}
		// Kill it with writes still going on.
		Eventually(t, CallTimeout, func() error {
			if n := ackedNow(); n < before+perRound/4 {
				return fmt.Errorf("%d writes this round", n-before)
			}
			return nil
		})
		pc.Kill9(t, nonvoter.Index)
		aside := filepath.Join(nonvoter.Dir, "raft-log.unsynced")
		_ = os.RemoveAll(aside)
		pc.Restart(t, nonvoter.Index)
		if _, err := os.Stat(aside); err != nil {
			t.Fatalf("round %d: %s restarted without setting its unsynced log aside: %v", round, nonvoter, err)
		}
		t.Logf("round %d: killed and restarted non-voter %s after %d writes", round, nonvoter, ackedNow())
	}
	Eventually(t, CallTimeout, func() error {
		if len(budget) > 0 {
			return fmt.Errorf("%d writes of the last round to go", len(budget))
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if n := fails.Load(); n > 0 {
		t.Logf("%d writes failed (retried)", n)
	}
	requireProcAgents(t, pc, acked)
}
