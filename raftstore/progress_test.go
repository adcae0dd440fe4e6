package raftstore

import "testing"

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
	if len(p.results) != 0 || len(p.calls) != 0 {
		t.Fatalf("left %d results, %d calls", len(p.results), len(p.calls))
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
