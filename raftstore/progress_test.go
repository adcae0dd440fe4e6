package raftstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestProgress_KeepsResultsOnlyForForwardedCalls(t *testing.T) {
	var p progress
	p.init()
	p.advance(1, 1, "no call yet", true)
	if _, ok := p.takeResult(1); ok {
		t.Fatal("kept a result with no forwarded call in flight")
	}

	a := p.beginForward() // after = 1
	p.advance(2, 1, "r2", true)
	p.advance(3, 1, nil, false) // configuration entry: nothing to keep
	b := p.beginForward()       // after = 3
	p.advance(4, 1, "r4", true)
	if r, ok := p.takeResult(4); !ok || r != "r4" {
		t.Fatalf("result 4: %v %v", r, ok)
	}
	if _, ok := p.takeResult(3); ok {
		t.Fatal("kept a non-command response")
	}
	p.advance(5, 1, "r5", true)
	p.endForward(a) // b (after = 3) remains: 2 is below it, 5 above
	if _, ok := p.results[2]; ok {
		t.Fatal("result 2 kept although no call can need it")
	}
	if r, ok := p.takeResult(5); !ok || r != "r5" {
		t.Fatalf("result 5: %v %v", r, ok)
	}
	p.advance(6, 1, "r6", true)
	p.endForward(b)
	if len(p.results) != 0 || p.calls.len() != 0 || p.kept.len() != 0 || p.live != 0 {
		t.Fatalf("left %d results (%d indexes), %d calls (%d live)", len(p.results), p.kept.len(), p.calls.len(), p.live)
	}
}

func TestProgress_Waiters(t *testing.T) {
	var p progress
	p.init()
	p.advance(5, 1, nil, false)
	if w := p.addWaiter(5); !isClosed(w.ch) {
		t.Fatal("waiter for a reached index not released")
	}
	w7, w9 := p.addWaiter(7), p.addWaiter(9)
	p.advance(8, 1, nil, false)
	if !isClosed(w7.ch) || isClosed(w9.ch) {
		t.Fatal("advance released the wrong waiters")
	}
	p.removeWaiter(w9)
	if len(p.waiters) != 0 {
		t.Fatal("waiter not removed")
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestProgress_EndForwardMatchesScan drives random begins, applies and
// ends (in any order) and checks after every end that exactly the results
// a live call can need are kept: those above the smallest after of the
// live calls, as a full scan would keep.
func TestProgress_EndForwardMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p progress
	p.init()
	var live []*forwardCall
	applied := uint64(0)
	for step := range 20000 {
		switch op := rng.IntN(3); {
		case op == 0 || len(live) == 0:
			live = append(live, p.beginForward())
		case op == 1:
			applied++
			p.advance(applied, 1, applied, rng.IntN(4) != 0)
		default:
			k := rng.IntN(len(live))
			c := live[k]
			live = append(live[:k], live[k+1:]...)
			p.endForward(c)
			floor := ^uint64(0)
			for _, o := range live {
				floor = min(floor, o.after)
			}
			for idx := range p.results {
				if len(live) == 0 || idx <= floor {
					t.Fatalf("step %d: result %d kept, no live call needs it (floor %d, %d live)", step, idx, floor, len(live))
				}
			}
			if p.live != len(live) {
				t.Fatalf("step %d: live = %d, want %d", step, p.live, len(live))
			}
		}
	}
	for _, c := range live {
		p.endForward(c)
	}
	if len(p.results) != 0 || p.calls.len() != 0 || p.kept.len() != 0 {
		t.Fatalf("left %d results, %d calls, %d indexes", len(p.results), p.calls.len(), p.kept.len())
	}
}

// TestProgress_KeepsWhatLiveCallsNeed: a result above a live call's start
// survives the end of older and younger calls alike.
func TestProgress_KeepsWhatLiveCallsNeed(t *testing.T) {
	var p progress
	p.init()
	old := p.beginForward() // after 0
	p.advance(1, 1, "r1", true)
	mid := p.beginForward() // after 1
	p.advance(2, 1, "r2", true)
	young := p.beginForward() // after 2
	p.advance(3, 1, "r3", true)
	p.endForward(young)
	p.endForward(old) // mid (after 1) remains: r1 goes, r2 and r3 stay
	if _, ok := p.results[1]; ok {
		t.Fatal("r1 kept although only a call begun after it is live")
	}
	for _, idx := range []uint64{2, 3} {
		if r, ok := p.takeResult(idx); !ok || r != fmt.Sprintf("r%d", idx) {
			t.Fatalf("result %d: %v %v", idx, r, ok)
		}
	}
	p.endForward(mid)
}

func TestFifo_PopCompacts(t *testing.T) {
	var q fifo[int]
	for i := range 1000 {
		q.push(i)
	}
	for i := range 990 {
		if v := q.pop(); v != i {
			t.Fatalf("pop %d: got %d", i, v)
		}
	}
	if q.len() != 10 || q.front() != 990 || len(q.s) > 500 {
		t.Fatalf("len %d front %d backing %d: the popped prefix was not reclaimed", q.len(), q.front(), len(q.s))
	}
}

// BenchmarkProgress_EndForward: 64 forwards in flight under steady
// applies, each ending in turn (the follower's load during a connect
// burst); the cost per end must not grow with the results kept.
func BenchmarkProgress_EndForward(b *testing.B) {
	var p progress
	p.init()
	calls := make([]*forwardCall, 0, 64)
	applied := uint64(0)
	for range 64 {
		calls = append(calls, p.beginForward())
		applied++
		p.advance(applied, 1, nil, true)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.endForward(calls[0])
		calls = append(calls[1:], p.beginForward())
		applied++
		p.advance(applied, 1, nil, true)
	}
}

// WaitApplyBatch returns at once between batches, waits for the end of
// the batch being applied, and gives up when its context ends.
func TestWaitApplyBatch(t *testing.T) {
	f, err := newFSM(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{fsm: f, stopCh: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.WaitApplyBatch(ctx)
	if ctx.Err() != nil {
		t.Fatal("waited with no batch being applied")
	}

	b := batchingFSM{f}
	f.beginBatch() // as ApplyBatch does before applying
	done := make(chan struct{})
	go func() {
		s.WaitApplyBatch(context.Background())
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("returned while a batch was being applied")
	case <-time.After(20 * time.Millisecond):
	}
	f.endBatch()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("did not return when the batch ended")
	}

	if out := b.ApplyBatch(nil); len(out) != 0 || f.batchDone() != nil {
		t.Fatalf("after ApplyBatch: %v results, batch still open: %v", len(out), f.batchDone() != nil)
	}
	f.beginBatch()
	defer f.endBatch()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	s.WaitApplyBatch(ctx) // returns when ctx ends
	if ctx.Err() == nil {
		t.Fatal("returned before its context ended, with a batch open")
	}
}
