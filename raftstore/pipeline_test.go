package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingHandler counts log records whose message contains substr.
type countingHandler struct {
	slog.Handler
	substr string
	n      *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.substr, h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.substr, h.n}
}

// With pipelining on, a follower that rejects AppendEntries (here its log
// writes fail for a moment) must not stop replication to it for good, and
// every store must still shut down. Before pipeline.go, raft's pipeline
// sender and its transport's decoder ended up parked on each other after
// such a rejection (grafana/pyroscope#5518): the follower kept getting
// heartbeats but never another entry, and raft.Shutdown waited forever.
// Each round rejects a burst of appends under steady writes, then checks
// the follower catches up; the race that parked the sender is likely but
// not certain per round, hence many rounds.
func TestCluster_PipelineSurvivesRejectedAppends(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	var fail atomic.Bool
	var pipelines atomic.Int64
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.MaxRPCsInFlight = 2 // both pipeline channels unbuffered, as in the report
		cfg.Logger = slog.New(countingHandler{cfg.Logger.Handler(), "pipelining replication", &pipelines})
		if cfg.NodeID == "n2" {
			cfg.LogWriteFault = func() error {
				if fail.Load() {
					return errors.New("injected log write fault")
				}
				return nil
			}
		}
	})
	leader := c.requireOneLeader(t, c.stores)
	var victim *Store
	for _, s := range c.stores {
		if s.ID() == "n2" {
			victim = s
		}
	}
	if leader == victim {
		// Writes would fail on the leader itself; move leadership away.
		if err := leader.LeadershipTransfer(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		leader = c.requireOneLeader(t, c.stores)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				// Errors are expected once leadership moves or ctx ends.
				_, _, _ = leader.Apply(ctx, cmdKVPut, put(fmt.Sprintf("w%d=%d", w, i)))
			}
		}()
	}

	var seen int64 // pipelines started before the last fault
	for r := range rounds {
		// A rejection ends the pipeline; wait for raft to start a new one
		// (it replicates plainly until the follower is caught up).
		eventually(t, waitTimeout, func() error {
			if n := pipelines.Load(); n <= seen {
				return fmt.Errorf("round %d: no pipeline started since the last fault (%d in all)", r, n)
			}
			return nil
		})
		seen = pipelines.Load()
		fail.Store(true)
		time.Sleep(20 * time.Millisecond) // some appends fail meanwhile
		fail.Store(false)
		target := leader.AppliedIndex()
		eventually(t, scaled(10*time.Second), func() error {
			if got := victim.AppliedIndex(); got < target {
				return fmt.Errorf("round %d: %s applied %d, leader had %d: replication to it stopped", r, victim.ID(), got, target)
			}
			return nil
		})
		if !leader.IsLeader() {
			t.Fatalf("round %d: %s lost leadership", r, leader.ID())
		}
	}
	cancel()
	wg.Wait()
	target := leader.AppliedIndex()
	for _, s := range c.stores {
		eventually(t, scaled(10*time.Second), func() error {
			if got := s.AppliedIndex(); got < target {
				return fmt.Errorf("after the writes %s applied %d, leader %d", s.ID(), got, target)
			}
			return nil
		})
	}
	// Shutdown (at cleanup, bounded by testCtx) must not hang either.
}
