//go:build linux

package clustertest

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// frozenStopBound is how long a leader may take to exit on SIGTERM with a
// follower frozen: under the node's 10 s shutdown budget. Raft alone used
// to wait its 10 s transport timeout, once or more, for the frozen
// follower (raftstore/DESIGN.md "Shutdown with a frozen peer").
const frozenStopBound = 9 * time.Second

// TestProcs_StopLeaderWithFrozenFollower SIGSTOPs a follower (its sockets
// stay open, it reads nothing), writes through the leader (committed by
// the other follower, and sent to the frozen one, which never answers),
// then SIGTERMs the leader: it must exit within frozenStopBound.
func TestProcs_StopLeaderWithFrozenFollower(t *testing.T) {
	pc := StartProcs(t, 3)
	leader := pc.Leader(t)
	var frozen *Proc
	for _, p := range pc.Procs() {
		if p != leader {
			frozen = p
		}
	}
	cl := pc.Connect(t, leader.Index, map[string]any{
		"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"},
	})
	frozen.signal(syscall.SIGSTOP, 0)
	// Runs before the cluster's cleanup (cleanups run last first).
	t.Cleanup(func() { frozen.signal(syscall.SIGCONT, 0) })
	for k := range 50 {
		if err := cl.Register(fmt.Sprintf("a-%d", k), nil); err != nil {
			t.Fatalf("write %d with %s frozen: %s", k, frozen, Describe(err))
		}
	}

	start := time.Now()
	if !leader.signal(syscall.SIGTERM, frozenStopBound) {
		leader.signal(syscall.SIGKILL, ProcStopTimeout)
		t.Fatalf("leader %s still running %s after SIGTERM with %s frozen, want exited within %s",
			leader, time.Since(start).Round(time.Millisecond), frozen, frozenStopBound)
	}
	t.Logf("leader %s exited %s after SIGTERM with %s frozen", leader, time.Since(start).Round(time.Millisecond), frozen)
}
