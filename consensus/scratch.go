package consensus

import "sync"

// scratch holds temporaries of the finalisation (the tally's indexes, the
// scoring's owner sets): they die before Step returns, so they are pooled
// instead of allocated per run. Step stays pure: nothing read from a
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
func (sc *scratch) int32s(n int) []int32 {
	if cap(sc.i32) < n {
		sc.i32 = make([]int32, n)
		return sc.i32
	}
	b := sc.i32[:n]
	clear(b)
	return b
}

// uint64s returns n zeroed uint64s; the previous result of uint64s must no
// longer be in use.
func (sc *scratch) uint64s(n int) []uint64 {
	if cap(sc.u64) < n {
		sc.u64 = make([]uint64, n)
		return sc.u64
	}
	b := sc.u64[:n]
	clear(b)
	return b
}
