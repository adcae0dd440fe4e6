package mapsvc

import (
	"context"
	"sync/atomic"
	"time"
)

// Read-your-writes on a connection (raftstore/DESIGN.md, "Returning
// results through the forward"). A write through a follower may be
// answered with the leader's result before this node's replica applied
// it. Each connection therefore keeps a fence: the highest Raft index of
// the writes it was answered. Every later request on the connection first
// waits until the local replica applied the fence, so what it reads here
// includes the connection's own writes. Requests on a connection are
// handled one at a time (node/rpc), and the fence is raised before the
// write's answer is sent, so "later" is every request the client sends
// after it read that answer.
//
// The fence travels as a pointer in connState (copied into the handler's
// snapshot), not as a context value: a value context around the
// connection's context would cost every Raft write a goroutine (context's
// cancel propagation finds no AfterFunc on it; node/rpc/connctx.go).

// fenceWaitLimit bounds a request's wait for its fence when the request's
// context has no deadline (raftstore's default ApplyTimeout: the wait
// the write itself would have made before answering).
const fenceWaitLimit = 10 * time.Second

// fence is a connection's read-your-writes index.
type fence struct{ index atomic.Uint64 }

// raise moves the fence up to index; it never moves down.
func (f *fence) raise(index uint64) {
	for {
		cur := f.index.Load()
		if index <= cur || f.index.CompareAndSwap(cur, index) {
			return
		}
	}
}

// awaitFence waits until the local replica applied f's index: usually at
// once (the commit reached this node while the answer travelled to the
// client and the next request back).
func (s *Service) awaitFence(ctx context.Context, f *fence) error {
	if f == nil || s.cfg.WaitApplied == nil {
		return nil
	}
	index := f.index.Load()
	if index == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fenceWaitLimit)
		defer cancel()
	}
	return s.cfg.WaitApplied(ctx, index)
}
