//go:build linux

package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkProcs_LeaderFailover: three real concord processes with
// production timings (no fast preset); the leader is killed with SIGKILL
// ten times (restarted after each round) and the time from the kill to the
// first successful write through a surviving node is measured (p50, p99,
// max), and separately the time until the survivors agree on a new
// leader (elected-p50-ms). The baseline from the same run: the leader stopped with SIGTERM
// (graceful: it hands leadership over first), five times.
//
// It ignores b.N: one run is the fixed number of rounds.
func BenchmarkProcs_LeaderFailover(b *testing.B) {
	b.Run("kill-9/rounds=10", func(b *testing.B) { benchFailover(b, 10, true) })
	b.Run("baseline-sigterm/rounds=5", func(b *testing.B) { benchFailover(b, 5, false) })
}

func benchFailover(b *testing.B, rounds int, kill bool) {
	pc := StartProcs(b, 3, WithProcArgs(func(int) []string { return []string{"--log-level", "warn"} }))
	system := map[string]any{"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}}
	var took, elections []time.Duration
	for round := range rounds {
		l := pc.Leader(b)
		var survivor *Proc
		for _, p := range pc.Running() {
			if p != l {
				survivor = p
			}
		}
		cl := pc.Connect(b, survivor.Index, system)
		if err := cl.Register(fmt.Sprintf("warm-%d", round), nil); err != nil {
			b.Fatalf("write before round %d: %s", round, Describe(err))
		}
		elected := make(chan time.Duration, 1)
		start := time.Now()
		go func() { // when do the survivors agree on a new leader?
			_ = Poll(context.Background(), LeaderTimeout, func() error {
				nl, err := pc.agreedLeader()
				if err != nil || nl == l {
					return fmt.Errorf("no new leader yet")
				}
				elected <- time.Since(start)
				return nil
			})
			close(elected)
		}()
		if kill {
			pc.Kill9(b, l.Index)
		} else {
			go pc.Proc(l.Index).signal(sigterm, ProcStopTimeout) // the write races the graceful stop
		}
		k := 0
		Eventually(b, LeaderTimeout, func() error {
			k++
			return cl.Register(fmt.Sprintf("r%d-%d", round, k), nil)
		})
		took = append(took, time.Since(start))
		if d, ok := <-elected; ok {
			elections = append(elections, d)
		}
		Eventually(b, ProcStopTimeout, func() error {
			if pc.Proc(l.Index).Running() {
				return fmt.Errorf("%s still stopping", l)
			}
			return nil
		})
		cl.Close()
		pc.Restart(b, l.Index)
	}
	p50, p99 := percentiles(took)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	e50, _ := percentiles(elections)
	b.ReportMetric(ms(e50), "elected-p50-ms")
	b.Logf("time to first write after the leader stopped: %v", took)
	b.Logf("time until the survivors agreed on a new leader: %v", elections)
}
