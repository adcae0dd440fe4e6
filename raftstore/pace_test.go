package raftstore

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fixedConfig is a configSource answering one configuration.
type fixedConfig struct {
	raft.ConfigurationFuture // nil: only the methods below are used
	servers                  []raft.Server
	err                      error
}

func (f fixedConfig) GetConfiguration() raft.ConfigurationFuture { return f }
func (f fixedConfig) Error() error                               { return f.err }
func (f fixedConfig) Configuration() raft.Configuration {
	return raft.Configuration{Servers: f.servers}
}

func TestPacer_Hold(t *testing.T) {
	servers := []raft.Server{{ID: "v", Suffrage: raft.Voter}, {ID: "nv", Suffrage: raft.Nonvoter}}
	const interval = 80 * time.Millisecond
	ok := &raft.AppendEntriesResponse{Success: true}
	tests := []struct {
		name     string
		interval time.Duration
		config   configSource // nil: raft not started yet
		id       raft.ServerID
		entries  int
		resp     *raft.AppendEntriesResponse
		stopped  bool
		paced    bool
	}{
		{"non-voter, partial batch", interval, fixedConfig{servers: servers}, "nv", 3, ok, false, true},
		{"voter", interval, fixedConfig{servers: servers}, "v", 3, ok, false, false},
		{"unknown server", interval, fixedConfig{servers: servers}, "x", 3, ok, false, false},
		{"heartbeat (no entries)", interval, fixedConfig{servers: servers}, "nv", 0, ok, false, false},
		{"full batch (catching up)", interval, fixedConfig{servers: servers}, "nv", 16, ok, false, false},
		{"rejected", interval, fixedConfig{servers: servers}, "nv", 3, &raft.AppendEntriesResponse{}, false, false},
		{"pacing off", 0, fixedConfig{servers: servers}, "nv", 3, ok, false, false},
		{"no configuration yet", interval, nil, "nv", 3, ok, false, false},
		{"configuration error", interval, fixedConfig{servers: servers, err: errors.New("x")}, "nv", 3, ok, false, false},
		{"store shutting down", interval, fixedConfig{servers: servers}, "nv", 3, ok, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop := make(chan struct{})
			if tt.stopped {
				close(stop)
			}
			p := &pacer{interval: tt.interval, maxBatch: 16, stop: stop}
			if tt.config != nil {
				p.setConfigSource(tt.config)
			}
			// The first append after a quiet spell is never paced.
			start := time.Now()
			p.hold(tt.id, start, tt.entries, tt.resp)
			if took := time.Since(start); took >= interval {
				t.Fatalf("first append held %s, want no pause", took)
			}
			// The second, right after, is held for the interval, if the
			// case is paced.
			second := time.Now()
			p.hold(tt.id, second, tt.entries, tt.resp)
			took := time.Since(second)
			if tt.paced && took < interval*9/10 {
				t.Fatalf("held %s, want about %s", took, interval)
			}
			if !tt.paced && took >= interval {
				t.Fatalf("held %s, want no pause", took)
			}
			// So is the third, which a paced goroutine starts when the
			// second's pause ends, less than an interval after the second
			// was answered.
			third := time.Now()
			if tt.paced {
				third = startAt(second.Add(interval))
			}
			p.hold(tt.id, third, tt.entries, tt.resp)
			if took := time.Since(third); tt.paced && took < interval*9/10 {
				t.Fatalf("third held %s, want about %s: steady appends go one per interval", took, interval)
			}
		})
	}
}

// After a quiet spell (nothing answered for 1.25 intervals) an append and
// the one right after it both go at once: a lone write's entry and its
// commit index (the nudge). The pause comes after those two ("held" is
// the pause after an append). Under steady writes, even with a timer
// firing late, every append is followed by a pause.
func TestPacer_QuietSpellAllowsTwo(t *testing.T) {
	const interval = 100 * time.Millisecond
	p := &pacer{interval: interval, maxBatch: 16, stop: make(chan struct{})}
	p.setConfigSource(fixedConfig{servers: []raft.Server{{ID: "nv", Suffrage: raft.Nonvoter}}})
	ok := &raft.AppendEntriesResponse{Success: true}
	tests := []struct {
		name  string
		quiet time.Duration // before the append
		after time.Duration // if set, the append starts this long after the previous one started
		held  bool
	}{
		{"first ever", 0, 0, false},
		{"its follow-up", 0, 0, true},
		{"steady, right after the pause", 0, interval, true},
		{"after a quiet spell", 2 * interval, 0, false},
		{"its follow-up again", 0, 0, true},
		{"a late timer (a tenth of an interval)", 0, interval + interval/10, true},
	}
	var prev time.Time // the previous append's start
	for _, tt := range tests {
		if tt.quiet > 0 {
			time.Sleep(tt.quiet) // the quiet spell is what is tested
		}
		called := time.Now()
		start := called
		if tt.after > 0 {
			// Planned from the previous start, so that this test running
			// late on a loaded machine does not turn a steady append into
			// one after a quiet spell.
			start = startAt(prev.Add(tt.after))
			called = time.Now()
		}
		prev = start
		p.hold("nv", start, 3, ok)
		if took := time.Since(start); tt.held && took < interval*9/10 {
			t.Fatalf("%s: held %s since its start, want about %s", tt.name, took, interval)
		}
		if took := time.Since(called); !tt.held && took >= interval/2 {
			t.Fatalf("%s: held %s, want no pause", tt.name, took)
		}
	}
}

// startAt waits until at, if it is still ahead, and returns it: the start
// of an append that raft's goroutine begins at a planned moment (when a
// pause ends), whether or not this test's goroutine runs late.
func startAt(at time.Time) time.Time {
	time.Sleep(time.Until(at)) // the time between appends is what is tested
	return at
}

// Under steady writes a non-voter gets far fewer, larger appends (log
// writes, each one fsync) than a voter, still holds every entry, and is
// no longer paced once promoted.
func TestCluster_NonvoterReplicationPaced(t *testing.T) {
	const interval = 100 * time.Millisecond
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.NonvoterReplicationInterval = interval })
	kv := newKV()
	cfg := clusterConfig(t, "nv", kv)
	cfg.NonvoterReplicationInterval = interval
	nv := mustNew(t, cfg)
	t.Cleanup(func() { mustShutdown(t, nv) })
	leader := c.requireOneLeader(t, c.stores)
	if err := leader.AddNonvoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}
	// The leader's pacer sees the change within suffrageTTL.
	paced := func(want bool) {
		eventually(t, waitTimeout, func() error {
			if got := leader.trans.pace.nonvoter(raft.ServerID(nv.ID())); got != want {
				return fmt.Errorf("leader's pacer says non-voter=%v for %s", got, nv.ID())
			}
			return nil
		})
	}
	paced(true)
	var voter *Store
	for _, s := range c.stores {
		if s != leader {
			voter = s
		}
	}

	stopWrites := steadyWrites(t, leader, 4)
	defer stopWrites()
	// batchesOver counts the log writes of each store during d, and the
	// entries the non-voter's carried.
	var nvEntries uint64
	batchesOver := func(d time.Duration) (voterN, nvN uint64) {
		v0, n0, e0 := voter.bolt.batches.Load(), nv.bolt.batches.Load(), nv.bolt.entries.Load()
		time.Sleep(d)
		nvEntries = nv.bolt.entries.Load() - e0
		return voter.bolt.batches.Load() - v0, nv.bolt.batches.Load() - n0
	}
	window := 10 * interval
	vb, nb := batchesOver(window)
	t.Logf("over %s: voter %d log writes, non-voter %d carrying %d entries", window, vb, nb, nvEntries)
	// One append per interval under steady writes, plus slack for a
	// window edge or a slow tick; full batches (MaxApplyBatch entries,
	// which a fast machine fills within an interval) are not paced.
	limit := uint64(window/interval) + 3
	if full := nvEntries / uint64(nv.cfg.MaxApplyBatch); nb > limit+full {
		t.Fatalf("non-voter had %d log writes in %s, want at most %d (paced every %s, %d full batches)", nb, window, limit+full, interval, full)
	}
	if nb == 0 {
		t.Fatal("non-voter received nothing")
	}

	// Promoted, it votes and must keep a voter's pace.
	// A loaded host may move leadership under steady writes: promote
	// through whichever store leads then (paced reads the same variable).
	eventually(t, waitTimeout, func() error {
		leader = c.requireOneLeader(t, c.stores)
		if err := leader.AddVoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
			if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) {
				return fmt.Errorf("add voter %s: %w", nv.ID(), err)
			}
			t.Fatalf("add voter %s: %v", nv.ID(), err)
		}
		return nil
	})
	paced(false)
	vb, nb = batchesOver(window)
	t.Logf("promoted, over %s: voter %d log writes, former non-voter %d", window, vb, nb)
	if nb <= limit && vb > 2*limit {
		t.Fatalf("promoted server had %d log writes in %s (voter %d): still paced", nb, window, vb)
	}

	stopWrites()
	// A cancelled Apply may still commit after the writers stopped, so
	// the leader's state can move on: compare once both applied the same
	// index (a real divergence never converges).
	eventually(t, waitTimeout, func() error {
		target := leader.AppliedIndex()
		if got := nv.AppliedIndex(); got != target {
			return fmt.Errorf("non-voter applied %d, leader %d", got, target)
		}
		if !maps.Equal(kv.snapshotMap(), c.kvOf(leader).snapshotMap()) {
			return fmt.Errorf("the non-voter's state differs from the leader's at index %d", target)
		}
		return nil
	})
}

// A write through a non-voter after a quiet spell is not delayed by the
// pacing: its entry and then its commit index (the nudge) are the two
// appends allowed per interval, so it takes a round of replication, not
// the interval.
func TestCluster_NonvoterWriteAfterQuietSpellNotPaced(t *testing.T) {
	const interval = time.Second
	_, fwd, leader := newForwardingCluster(t, 3, func(cfg *Config) { cfg.NonvoterReplicationInterval = interval })
	cfg := clusterConfig(t, "nv", newKV())
	cfg.NonvoterReplicationInterval = interval
	cfg.Forwarder = fwd
	nv := mustNew(t, cfg)
	t.Cleanup(func() { mustShutdown(t, nv) })
	if err := leader.AddNonvoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		time.Sleep(interval * 3 / 2) // a quiet spell (pace.go: at least 1.25 intervals)
		start := time.Now()
		if _, _, err := nv.Apply(testCtx(t), cmdKVPut, put(fmt.Sprintf("quiet%d=1", i))); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= interval*7/10 {
			t.Fatalf("write %d through the non-voter took %s: held by the pacing (%s)", i, took, interval)
		}
	}
}
