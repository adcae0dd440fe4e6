package consensus

import "sync"

// scratch holds temporaries of the finalisation (the tally's indexes, the
// scoring's owner sets): they die before Apply returns, so they are pooled
// instead of allocated per run. Apply stays pure: nothing read from a
// scratch outlives the call that took it, and every slice handed out is
// zeroed.
type scratch struct {
	i32 []int32
	u64 []uint64
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledScratch bounds the elements a pooled scratch keeps, so one huge
// catalog does not pin its memory forever.
const maxPooledScratch = 1 << 16

func getScratch() *scratch { return scratches.Get().(*scratch) }

func (sc *scratch) release() {
	if cap(sc.i32) > maxPooledScratch {
		sc.i32 = nil
	}
	if cap(sc.u64) > maxPooledScratch {
		sc.u64 = nil
	}
	scratches.Put(sc)
}

// int32s returns n zeroed int32s; the previous result of int32s must no
// longer be in use.
func (sc *scratch) int32s(n int) []int32 { return zeroed(&sc.i32, n) }

// uint64s returns n zeroed uint64s; the previous result of uint64s must no
// longer be in use.
func (sc *scratch) uint64s(n int) []uint64 { return zeroed(&sc.u64, n) }

// zeroed returns n zeroed elements of *buf, growing it when too small.
func zeroed[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
		return *buf
	}
	b := (*buf)[:n]
	clear(b)
	return b
}
