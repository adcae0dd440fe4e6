package raftstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A non-voter nobody waits on is paced at the background interval; one
// with an index a client there waits for (hurry) not yet delivered gets
// its next append at once, or at the interval right after a hurried one
// (hurries coalesce); voters and an off switch are unaffected.
func TestPacer_BackgroundInterval(t *testing.T) {
	const interval, background = 30 * time.Millisecond, 150 * time.Millisecond
	servers := []raft.Server{{ID: "v", Suffrage: raft.Voter}, {ID: "nv", Suffrage: raft.Nonvoter}}
	ok := &raft.AppendEntriesResponse{Success: true}
	tests := []struct {
		name       string
		background time.Duration
		id         raft.ServerID
		wanted     uint64 // > 0: hurried for this index
		delivered  uint64 // an append delivered up to this index
		afterHurry bool   // the append held was itself a hurried one
		want       time.Duration
	}{
		{"nobody waits", background, "nv", 0, 0, false, background},
		{"hurried, not delivered yet: at once", background, "nv", 10, 9, false, 0},
		{"hurried again right after a hurried append: coalesced", background, "nv", 10, 9, true, interval},
		{"hurried, delivered", background, "nv", 10, 10, false, background},
		{"hurried append delivered it", background, "nv", 10, 10, true, background},
		{"background off (0)", 0, "nv", 0, 0, false, interval},
		{"background not above the interval", interval / 2, "nv", 0, 0, false, interval},
		{"voter", background, "v", 10, 0, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timingAttempts(t, func() error {
				p := &pacer{interval: interval, background: tt.background, maxBatch: 16, stop: make(chan struct{})}
				p.setConfigSource(fixedConfig{servers: servers})
				p.hold(tt.id, time.Now(), 3, ok) // the first is never paced
				if tt.wanted > 0 {
					p.hurry(tt.id, tt.wanted)
				}
				if tt.delivered > 0 {
					// What raft's append would carry: entries up to
					// delivered+5, the commit index at delivered.
					p.delivered(tt.id, &raft.AppendEntriesRequest{
						PrevLogEntry: tt.delivered, Entries: []*raft.Log{{Index: tt.delivered + 5}}, LeaderCommitIndex: tt.delivered,
					}, ok)
				}
				if tt.afterHurry {
					p.mu.Lock()
					p.peer(tt.id).hurried = true
					p.mu.Unlock()
				}
				start := time.Now()
				p.hold(tt.id, start, 3, ok)
				took := time.Since(start)
				if tt.want == 0 {
					if took >= interval {
						return fmt.Errorf("held %s, want no pause", took)
					}
					return nil
				}
				// Late by a loaded machine's scheduling, never early; and
				// clearly short of the other interval.
				if took < tt.want*9/10 || (tt.want == interval && took >= background*2/3) {
					return fmt.Errorf("held %s, want about %s", took, tt.want)
				}
				return nil
			})
		})
	}
}

// What an append delivers is the lower of its last entry (its previous
// entry when it carries none) and its commit index; a refused one means
// the follower lacks entries, and what it was delivered no longer counts.
func TestPacer_Delivered(t *testing.T) {
	p := &pacer{interval: time.Millisecond, background: time.Second}
	p.hurry("nv", 100)
	ok, refused := &raft.AppendEntriesResponse{Success: true}, &raft.AppendEntriesResponse{}
	for _, tc := range []struct {
		name string
		args raft.AppendEntriesRequest
		resp *raft.AppendEntriesResponse
		want uint64
	}{
		{"entries past the commit", raft.AppendEntriesRequest{PrevLogEntry: 80, Entries: []*raft.Log{{Index: 81}, {Index: 99}}, LeaderCommitIndex: 90}, ok, 90},
		{"commit past the entries", raft.AppendEntriesRequest{PrevLogEntry: 90, Entries: []*raft.Log{{Index: 95}}, LeaderCommitIndex: 120}, ok, 95},
		{"commit-index update (no entries)", raft.AppendEntriesRequest{PrevLogEntry: 99, LeaderCommitIndex: 120}, ok, 99},
		{"an older one never lowers it", raft.AppendEntriesRequest{PrevLogEntry: 10, LeaderCommitIndex: 10}, ok, 99},
		{"refused: it lacks entries", raft.AppendEntriesRequest{PrevLogEntry: 99, LeaderCommitIndex: 120}, refused, 0},
		{"delivered again", raft.AppendEntriesRequest{PrevLogEntry: 99, Entries: []*raft.Log{{Index: 130}}, LeaderCommitIndex: 101}, ok, 101},
	} {
		p.delivered("nv", &tc.args, tc.resp)
		p.mu.Lock()
		got, iv := p.peers["nv"].delivered, p.intervalOf(p.peers["nv"])
		p.mu.Unlock()
		if got != tc.want {
			t.Fatalf("%s: delivered %d, want %d", tc.name, got, tc.want)
		}
		if wantIv := map[bool]time.Duration{true: time.Millisecond, false: time.Second}[tc.want < 100]; iv != wantIv {
			t.Fatalf("%s: interval %s, want %s", tc.name, iv, wantIv)
		}
	}
}

// A hurry for a non-voter in a background pause ends the pause at once,
// however soon after the paused append started: the client waits for one
// append, not for a 20 ms pace. Hurries that the hurried append does not
// deliver (several clients of one non-voter) coalesce: the next append
// goes once the interval has passed since the hurried one started.
func TestPacer_HurryEndsBackgroundPause(t *testing.T) {
	const interval, background = 80 * time.Millisecond, 2 * time.Second
	ok := &raft.AppendEntriesResponse{Success: true}
	newPacer := func() *pacer {
		p := &pacer{interval: interval, background: background, maxBatch: 16, stop: make(chan struct{})}
		p.setConfigSource(fixedConfig{servers: []raft.Server{{ID: "nv", Suffrage: raft.Nonvoter}}})
		p.hold("nv", time.Now(), 3, ok) // the first is never paced
		return p
	}

	for i, hurryAt := range []time.Duration{interval / 8, 2 * interval} {
		timingAttempts(t, func() error {
			p := newPacer()
			start := time.Now()
			done := make(chan time.Duration, 1)
			go func() {
				p.hold("nv", start, 3, ok)
				done <- time.Since(start)
			}()
			time.Sleep(hurryAt) // the hurry's moment in the pause is what is tested
			hurried := time.Since(start)
			p.hurry("nv", uint64(10*(i+1)))
			select {
			case took := <-done:
				if took < hurryAt {
					return fmt.Errorf("hurried after %s: pause ended after %s, before the hurry", hurryAt, took)
				}
				if late := took - hurried; late >= interval/2 {
					return fmt.Errorf("hurried after %s: pause ended %s after the hurry, want at once (the interval is %s)", hurried, late, interval)
				}
			case <-time.After(background / 2):
				return fmt.Errorf("hurried after %s: still paused %s later: the background pause (%s) ran on", hurried, background/2, background)
			}
			return nil
		})
	}

	// A hurried append on its way; another client's hurry arrives, which
	// it does not deliver: the next append waits for the interval after
	// the hurried one started, no longer.
	timingAttempts(t, func() error {
		p := newPacer()
		start := time.Now() // a background pause, ended by a hurry
		done := make(chan time.Duration, 1)
		go func() {
			p.hold("nv", start, 3, ok)
			done <- time.Since(start)
		}()
		time.Sleep(interval / 8) // the pause has begun
		hurryAt := time.Since(start)
		p.hurry("nv", 30)
		if took := <-done; took >= hurryAt+interval/2 {
			return fmt.Errorf("pause ended %s after it began, %s after a hurry: want at once", took, hurryAt)
		}
		hurried := time.Now() // the hurried append starts
		p.hurry("nv", 40)
		p.delivered("nv", &raft.AppendEntriesRequest{PrevLogEntry: 30, LeaderCommitIndex: 30}, ok)
		p.hold("nv", hurried, 3, ok)
		if took := time.Since(hurried); took < interval*9/10 || took >= background/2 {
			return fmt.Errorf("after a hurried append that left a hurry undelivered, held %s, want about the interval %s", took, interval)
		}
		return nil
	})
}

// Shutdown ends a background pause at once too.
func TestPacer_StopEndsBackgroundPause(t *testing.T) {
	stop := make(chan struct{})
	p := &pacer{interval: 10 * time.Millisecond, background: time.Minute, maxBatch: 16, stop: stop}
	p.setConfigSource(fixedConfig{servers: []raft.Server{{ID: "nv", Suffrage: raft.Nonvoter}}})
	ok := &raft.AppendEntriesResponse{Success: true}
	p.hold("nv", time.Now(), 3, ok)
	done := make(chan struct{})
	go func() {
		p.hold("nv", time.Now(), 3, ok)
		close(done)
	}()
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a background pause outlived the store's stop")
	}
}

// originForwarder forwards one store's commands to the leader the way
// node/cluster does: with the origin's ID, so the leader's pacing knows
// a client of that store waits.
type originForwarder struct {
	c      *testCluster
	origin string
}

func (f *originForwarder) Forward(ctx context.Context, leaderID, _ string, cmd []byte) (ForwardReply, error) {
	for _, s := range f.c.stores {
		if s.ID() == leaderID {
			return s.ApplyForwardedFrom(ctx, f.origin, cmd)
		}
	}
	return ForwardReply{}, ErrNoLeader
}

// Under steady writes a non-voter nobody waits on gets one append per
// background interval; once a client writes through it, its writes come
// back within about the (short) interval, and it gets appends at that
// pace; every entry reaches it either way.
func TestCluster_NonvoterBackgroundPaceUntilAClientWaits(t *testing.T) {
	// The background interval is the longest allowed, 50 times the short
	// one, so that what is measured (latencies of a non-voter's clients)
	// tells the two apart on a loaded machine: paced at the background
	// interval, the median wait is about half of it (500 ms); paced at
	// the short one it stays far below a quarter of it even where -race
	// and other work on 2 cores slow every write (a run at 200 ms saw a
	// median of 136 ms against a bound of 100).
	const interval, background = 20 * time.Millisecond, time.Second
	pacing := func(cfg *Config) {
		cfg.NonvoterReplicationInterval, cfg.NonvoterBackgroundInterval = interval, background
	}
	c := newTestCluster(t, 3, pacing)
	kv := newKV()
	cfg := clusterConfig(t, "nv", kv)
	pacing(&cfg)
	cfg.Forwarder = &originForwarder{c: c, origin: "nv"}
	nv := mustNew(t, cfg)
	t.Cleanup(func() { mustShutdown(t, nv) })
	leader := c.requireOneLeader(t, c.stores)
	if err := leader.AddNonvoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		if !leader.trans.pace.nonvoter(raft.ServerID(nv.ID())) {
			return fmt.Errorf("leader's pacer does not know %s is a non-voter yet", nv.ID())
		}
		return nil
	})
	stopWrites := steadyWrites(t, leader, 4)
	defer stopWrites()

	window := 4 * background
	appendsOver := func(d time.Duration) (batches, entries uint64) {
		b0, e0 := nv.bolt.batches.Load(), nv.bolt.entries.Load()
		time.Sleep(d) // counting what arrives in a window is what is tested
		return nv.bolt.batches.Load() - b0, nv.bolt.entries.Load() - e0
	}
	nb, ne := appendsOver(window)
	t.Logf("nobody waiting, over %s: non-voter %d log writes carrying %d entries", window, nb, ne)
	limit := uint64(window/background) + 3 + ne/uint64(nv.cfg.MaxApplyBatch)
	if nb == 0 || nb > limit {
		t.Fatalf("non-voter had %d log writes in %s, want 1..%d (paced every %s)", nb, window, limit, background)
	}

	// A client of the non-voter writes in a loop; each write returns once
	// the non-voter applied it (the test module has no result codec), so
	// its latency is what pacing makes a non-voter's client wait.
	var took []time.Duration
	deadline := time.Now().Add(2 * background)
	for i := 0; time.Now().Before(deadline) || len(took) < 10; i++ {
		t0 := time.Now()
		if _, _, err := nv.Apply(testCtx(t), cmdKVPut, put(fmt.Sprintf("mine=%d", i))); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	p50 := took[len(took)/2]
	t.Logf("a client writing through the non-voter: %d writes, p50 %s, max %s", len(took), p50, took[len(took)-1])
	if p50 >= background/4 {
		t.Fatalf("writes through the non-voter took p50 %s: still paced at the background interval %s", p50, background)
	}

	// A read-your-write fence on the non-voter for the leader's latest
	// commit (WaitAppliedSoon forwards a NOOP from it) waits about the
	// interval too, not the background interval.
	// Only fences the non-voter had not reached yet count; under steady
	// writes most are (a paced non-voter trails by up to the background
	// interval).
	var fenced []time.Duration
	for try := 0; try < 40 && len(fenced) < 8; try++ {
		time.Sleep(background / 3) // leave the short interval's reach: a background pause is running
		idx := leader.AppliedIndex()
		behind := nv.AppliedIndex() < idx
		t0 := time.Now()
		if err := nv.WaitAppliedSoon(testCtx(t), idx); err != nil {
			t.Fatal(err)
		}
		if behind {
			fenced = append(fenced, time.Since(t0))
		}
	}
	if len(fenced) < 3 {
		t.Fatalf("the non-voter was behind the leader at %d fences of 40 under steady writes: the fences tested nothing", len(fenced))
	}
	slices.Sort(fenced)
	t.Logf("fences on the non-voter while behind: %d, p50 %s, max %s", len(fenced), fenced[len(fenced)/2], fenced[len(fenced)-1])
	if p50 := fenced[len(fenced)/2]; p50 >= background/4 {
		t.Fatalf("read-your-write fences on the non-voter took p50 %s: paced at the background interval %s", p50, background)
	}

	stopWrites()
	eventually(t, waitTimeout, func() error {
		if got, want := nv.AppliedIndex(), leader.AppliedIndex(); got != want {
			return fmt.Errorf("non-voter applied %d, leader %d", got, want)
		}
		return nil
	})
}

// Only a forward whose origin waits for its own apply hurries the
// origin's replication: a NOOP (a read-your-write fence, hurried on
// arrival) or a command without an encoded result (once committed); one
// answered with the leader's encoded result does not, and neither does a
// refused one.
func TestApplyForwardedFrom_HurriesOnlyWaitingOrigins(t *testing.T) {
	var decoded atomic.Int64
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.Modules[0] = codecKV{kvModule: cfg.Modules[0].(*kvModule), decoded: &decoded}
		cfg.NonvoterReplicationInterval, cfg.NonvoterBackgroundInterval = 20*time.Millisecond, 100*time.Millisecond
	})
	leader := c.requireOneLeader(t, c.stores)
	for _, tc := range []struct {
		name   string
		cmd    []byte
		hurry  bool
		origin string
	}{
		{"encoded result", encode(cmdKVPut, put("a=1")), false, "nv"},
		{"fence NOOP", nudgeBody, true, "nv"},
		{"declined type (the origin applies it to answer)", encode(cmdKVDelete, put("a")), true, "nv"},
		{"unknown command type (refused)", []byte{0xee}, false, "nv"},
		{"no origin", nudgeBody, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader.trans.pace.mu.Lock()
			clear(leader.trans.pace.peers)
			leader.trans.pace.mu.Unlock()
			_, _ = leader.ApplyForwardedFrom(testCtx(t), tc.origin, tc.cmd)
			leader.trans.pace.mu.Lock()
			pp := leader.trans.pace.peers[raft.ServerID(tc.origin)]
			leader.trans.pace.mu.Unlock()
			if got := pp != nil && pp.wanted > 0; got != tc.hurry {
				t.Fatalf("hurried %v, want %v", got, tc.hurry)
			}
		})
	}
}

// The leader's log cache holds a background interval of writes at 10,000
// writes/s (more than this machine's 3 voters reach), so a paced
// non-voter's append is read from memory, not the log store.
func TestLogCacheCoversABackgroundInterval(t *testing.T) {
	const rate = 10_000 // writes/s
	bg := DefaultConfig().NonvoterBackgroundInterval
	if need := int(rate * bg / time.Second); logCacheEntries < need {
		t.Fatalf("log cache of %d entries, want at least %d: %s of writes at %d/s", logCacheEntries, need, bg, rate)
	}
}

// Several clients of one non-voter fencing all the time (read-your-write
// fences for the leader's latest commit): every fence is satisfied, about
// as fast as a lone one, and their hurries coalesce, so the non-voter gets
// at most about one append per interval beyond the background ones and
// full batches, not one per fence.
func TestCluster_NonvoterConcurrentFencesCoalesce(t *testing.T) {
	// A long background interval, for a loaded machine: see
	// TestCluster_NonvoterBackgroundPaceUntilAClientWaits.
	const interval, background = 20 * time.Millisecond, time.Second
	pacing := func(cfg *Config) {
		cfg.NonvoterReplicationInterval, cfg.NonvoterBackgroundInterval = interval, background
	}
	c := newTestCluster(t, 3, pacing)
	cfg := clusterConfig(t, "nv", newKV())
	pacing(&cfg)
	cfg.Forwarder = &originForwarder{c: c, origin: "nv"}
	nv := mustNew(t, cfg)
	t.Cleanup(func() { mustShutdown(t, nv) })
	leader := c.requireOneLeader(t, c.stores)
	if err := leader.AddNonvoter(testCtx(t), nv.ID(), nv.Addr()); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		if !leader.trans.pace.nonvoter(raft.ServerID(nv.ID())) {
			return fmt.Errorf("leader's pacer does not know %s is a non-voter yet", nv.ID())
		}
		return nil
	})
	stopWrites := steadyWrites(t, leader, 4)
	defer stopWrites()

	const clients = 4
	window := 2 * background
	b0, e0 := nv.bolt.batches.Load(), nv.bolt.entries.Load()
	start := time.Now()
	var mu sync.Mutex
	var fenced []time.Duration // fences that found the non-voter behind
	var wg sync.WaitGroup
	for k := range clients {
		wg.Go(func() {
			for time.Since(start) < window {
				idx := leader.AppliedIndex()
				behind := nv.AppliedIndex() < idx
				t0 := time.Now()
				if err := nv.WaitAppliedSoon(testCtx(t), idx); err != nil {
					t.Errorf("client %d: fence for %d: %v", k, idx, err)
					return
				}
				if got := nv.AppliedIndex(); got < idx {
					t.Errorf("client %d: fence for %d returned with %d applied", k, idx, got)
					return
				}
				if behind {
					mu.Lock()
					fenced = append(fenced, time.Since(t0))
					mu.Unlock()
				}
				// Each client's think time differs, so their fences
				// arrive at different moments of an append.
				time.Sleep(time.Duration(k+1) * 3 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	batches, entries := nv.bolt.batches.Load()-b0, nv.bolt.entries.Load()-e0
	if t.Failed() {
		return
	}
	if len(fenced) < 20 {
		t.Fatalf("only %d fences found the non-voter behind in %s: the test tested nothing", len(fenced), took)
	}
	slices.Sort(fenced)
	t.Logf("%d clients: %d fences while behind, p50 %s, max %s; non-voter %d log writes carrying %d entries in %s",
		clients, len(fenced), fenced[len(fenced)/2], fenced[len(fenced)-1], batches, entries, took)
	if p50 := fenced[len(fenced)/2]; p50 >= background/4 {
		t.Fatalf("fences took p50 %s: paced at the background interval %s", p50, background)
	}
	limit := uint64(took/interval) + uint64(took/background) + 3 + entries/uint64(nv.cfg.MaxApplyBatch)
	if batches > limit || batches >= uint64(len(fenced)) {
		t.Fatalf("non-voter had %d log writes for %d fences in %s, want at most %d (one per interval) and fewer than the fences",
			batches, len(fenced), took, limit)
	}
}
