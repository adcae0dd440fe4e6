package raftstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestEarlyAppend_FollowerStoresBeforeLeaderSyncs holds the leader inside
// one append, between its write and its fsync, and watches whether a
// follower stores the entry meanwhile: with the early append it does (the
// two fsyncs overlap); without it raft replicates only after the leader's
// fsync, so no follower can. The write still commits in both cases.
func TestEarlyAppend_FollowerStoresBeforeLeaderSyncs(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  bool
		want bool
	}{
		{"on", false, true},
		{"off", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 3, func(cfg *Config) { cfg.NoEarlyAppend = tc.off })
			leader := c.requireOneLeader(t, c.stores)
			ctx := testCtx(t)
			// Every follower holds the log up to here: the next batch
			// continues it.
			_, warm, err := leader.Apply(ctx, cmdKVPut, put("warm=1"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range c.stores {
				eventually(t, waitTimeout, func() error {
					if got := f.raft.LastIndex(); got < warm {
						return fmt.Errorf("%s has index %d, want %d", f.ID(), got, warm)
					}
					return nil
				})
			}
			// How long the leader is held: far longer than a loopback
			// round trip and a follower's fsync, short against the
			// 500 ms lease.
			hold := scaled(250 * time.Millisecond)
			seen := make(chan bool, 1)
			var armed = true
			hook := func(logs []*raft.Log) {
				if !armed { // only the first append after arming
					return
				}
				armed = false // raft's leader goroutine is the only caller
				last := logs[len(logs)-1].Index
				deadline := time.Now().Add(hold)
				for time.Now().Before(deadline) {
					for _, f := range c.stores {
						if f != leader && f.raft.LastIndex() >= last {
							seen <- true
							return
						}
					}
					time.Sleep(time.Millisecond)
				}
				seen <- false
			}
			leader.testHookLogWritten.Store(&hook)
			if _, _, err := leader.Apply(ctx, cmdKVPut, put("early=1")); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, seen, "the hooked append"); got != tc.want {
				t.Fatalf("a follower stored the entry before the leader's fsync: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEarlyAppend_Eligible(t *testing.T) {
	cmd := func(n int) []*raft.Log {
		logs := make([]*raft.Log, n)
		for i := range logs {
			logs[i] = &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand}
		}
		return logs
	}
	withConfig := cmd(2)
	withConfig[1].Type = raft.LogConfiguration
	noop := []*raft.Log{{Index: 1, Type: raft.LogNoop}}
	for _, tc := range []struct {
		name string
		logs []*raft.Log
		want bool
	}{
		{"empty", nil, false},
		{"one command", cmd(1), true},
		{"largest batch", cmd(earlyAppendMaxEntries), true},
		{"batch too large", cmd(earlyAppendMaxEntries + 1), false},
		{"noop", noop, true},
		{"configuration change", withConfig, false},
	} {
		if got := eligible(tc.logs); got != tc.want {
			t.Errorf("%s: eligible = %v, want %v", tc.name, got, tc.want)
		}
	}
}
