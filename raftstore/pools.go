package raftstore

import (
	"sync"
	"time"
)

// Pools for the per-write waits of Apply (awaitUntil). Since Go 1.23 a
// stopped or reset Timer delivers no stale tick, so a pooled timer is as
// good as a new one.
var (
	timers    sync.Pool // *time.Timer, stopped
	doneChans sync.Pool // chan error, capacity 1, empty
)

// getTimer returns a timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and pools it; the caller must not use t afterwards.
func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// getDoneChan returns an empty channel of capacity 1. Put it back in
// doneChans only after receiving the one value sent on it.
func getDoneChan() chan error {
	if ch, ok := doneChans.Get().(chan error); ok {
		return ch
	}
	return make(chan error, 1)
}
