package raftstore

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// countPuts counts the indexes at which kv applied the put kv (a double
// apply shows up as 2).
func (k *kvModule) countPuts(kv string) int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	n := 0
	for _, v := range k.byIndex {
		if v == kv {
			n++
		}
	}
	return n
}

// A leader whose leadership moves between Apply's leader check and
// raft.Apply gets raft's ErrNotLeader for a command raft never appended.
// Apply must then forward it to the new leader (once) instead of failing.
func TestCluster_ApplyForwardsWhenLeadershipMovesBeforePropose(t *testing.T) {
	fwd := &directForwarder{}
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.Forwarder = fwd })
	fwd.c = c
	ctx := testCtx(t)
	old := c.requireOneLeader(t, c.stores)

	var once sync.Once
	old.testHookBeforeApply = func() {
		once.Do(func() {
			// Hand leadership away inside the window and wait until this
			// server knows it is a follower of someone else.
			if err := old.LeadershipTransfer(ctx); err != nil && !errors.Is(err, ErrNotLeader) {
				t.Errorf("leadership transfer: %v", err)
			}
			eventually(t, waitTimeout, func() error {
				if id, _ := old.Leader(); old.IsLeader() || id == "" || id == old.ID() {
					return errors.New("leadership has not moved yet")
				}
				return nil
			})
		})
	}

	res, idx, err := old.Apply(ctx, cmdKVPut, put("race=1"))
	if err != nil {
		t.Fatalf("apply across a leadership move: %v", err)
	}
	if res != "" || idx == 0 {
		t.Fatalf("apply = %v at %d, want the previous value \"\" and an index", res, idx)
	}
	if n := fwd.calls.Load(); n != 1 {
		t.Fatalf("%d forwards, want 1", n)
	}
	leader := c.requireOneLeader(t, c.stores)
	if leader == old {
		t.Fatal("leadership did not move")
	}
	if got := c.kvOf(leader).at(idx); got != "race=1" {
		t.Fatalf("leader holds %q at %d", got, idx)
	}
	for _, s := range c.stores {
		if err := s.WaitApplied(ctx, idx); err != nil {
			t.Fatal(err)
		}
		if n := c.kvOf(s).countPuts("race=1"); n != 1 {
			t.Fatalf("%s applied the command %d times", s.ID(), n)
		}
	}
}

// ErrLeadershipLost means the command was appended and may still commit:
// Apply returns it unchanged and never forwards (which could apply twice).
func TestCluster_ApplyLeadershipLostIsNotForwarded(t *testing.T) {
	fwd := &directForwarder{}
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.Forwarder = fwd
		// A lease long enough that the leader is still leading when raft
		// appends the command after both followers have been shut down.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	})
	fwd.c = c
	ctx := testCtx(t)
	leader := c.requireOneLeader(t, c.stores)

	var once sync.Once
	leader.testHookBeforeApply = func() {
		once.Do(func() {
			for _, s := range c.stores {
				if s != leader {
					mustShutdown(t, s) // no quorum: the append cannot commit
				}
			}
		})
	}
	start := time.Now()
	_, _, err := leader.Apply(ctx, cmdKVPut, put("lost=1"))
	if !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("apply without a quorum = %v, want ErrLeadershipLost", err)
	}
	if n := fwd.calls.Load(); n != 0 {
		t.Fatalf("an outcome-unknown command was forwarded %d times", n)
	}
	t.Logf("leadership lost after %v", time.Since(start).Round(time.Millisecond))
}
