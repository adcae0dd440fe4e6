package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"
)

// safePipeline wraps raft's netPipeline to break the deadlock that made
// pipelining unusable (DESIGN.md, "Pipelined replication"). raft's chain
// is: sender -> inprogressCh -> the transport's decoder -> doneCh ->
// raft's pipelineDecode. pipelineDecode returns at the first rejected
// response (a follower's failed write, a log mismatch, a newer term), and
// nothing drains doneCh after that; the sender can still pick one more
// trigger and send, parking on inprogressCh while the transport's decoder
// parks on doneCh. Only netPipeline.Close frees them, and raft defers it
// in the very goroutine that is parked: replication to that follower stops
// for good and raft.Shutdown waits on it forever.
//
// Here a goroutine always drains the transport's doneCh and hands each
// future to raft; after handing over a rejected one (which raft's decoder
// reads and then stops) it closes the transport's pipeline, which fails
// the parked send with ErrPipelineShutdown, so raft falls back to plain
// replication and retries.
type safePipeline struct {
	inner    raft.AppendPipeline
	out      chan raft.AppendFuture // what raft's pipelineDecode reads
	stop     chan struct{}          // closed by Close
	done     chan struct{}          // closed when forward returns
	once     sync.Once              // closes inner
	err      error                  // inner.Close's result; set once
	stopOnce sync.Once
}

func newSafePipeline(inner raft.AppendPipeline) *safePipeline {
	p := &safePipeline{
		inner: inner,
		out:   make(chan raft.AppendFuture),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go p.forward()
	return p
}

// forward moves finished futures from the transport to raft until a
// rejected one or Close.
func (p *safePipeline) forward() {
	defer close(p.done)
	in := p.inner.Consumer()
	for {
		var f raft.AppendFuture
		select {
		case f = <-in:
		case <-p.stop:
			return
		}
		select {
		case p.out <- f:
		case <-p.stop:
			return
		}
		if rejected(f) {
			// raft's decoder has returned or is returning; free the
			// sender and the transport's decoder.
			p.closeInner()
			return
		}
	}
}

// rejected mirrors the conditions on which raft's pipelineDecode stops
// reading: a newer term, or no success (which a decode error also gives).
func rejected(f raft.AppendFuture) bool {
	resp, req := f.Response(), f.Request()
	return resp == nil || req == nil || resp.Term > req.Term || !resp.Success
}

func (p *safePipeline) closeInner() {
	p.once.Do(func() { p.err = p.inner.Close() })
}

// AppendEntries implements raft.AppendPipeline.
func (p *safePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	return p.inner.AppendEntries(args, resp)
}

// Consumer implements raft.AppendPipeline.
func (p *safePipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// Close implements raft.AppendPipeline: it closes the transport's
// pipeline and waits for the forwarding goroutine. Idempotent.
func (p *safePipeline) Close() error {
	p.closeInner()
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
	return p.err
}
