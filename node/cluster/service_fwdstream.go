package cluster

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// maxRepliesPerBatch caps the answers sent in one ForwardBatchReply.
const maxRepliesPerBatch = 256

// ForwardStream is Forward for a follower's stream of commands. Every
// command of a batch is proposed at once, each on its own goroutine
// (raft appends the concurrent proposals as one log write), and each is
// answered by id as it completes, with what Forward would have answered.
// At most Config.ForwardStreamMaxInFlight commands of a stream run (or
// wait for their answer to be sent) at a time; past that the stream is
// not read, so a follower that sends faster is held by flow control.
// On Shutdown it takes no more commands and returns once those started
// are answered (the follower fails the rest as "outcome unknown").
//
// Few hand-offs per command, because each costs a wait for a CPU on a
// busy node: the reader goroutine starts the commands itself, and the
// command that finishes sends the answers (its own and those finished
// meanwhile) itself, unless another is sending, which then sends them.
func (v *service) ForwardStream(stream concordv1.Cluster_ForwardStreamServer) error {
	fs := &fwdServerStream{
		v: v, stream: stream, ctx: stream.Context(),
		slots:  make(chan struct{}, v.s.cfg.ForwardStreamMaxInFlight),
		broken: make(chan struct{}),
	}
	read := make(chan error, 1)
	v.s.wg.Add(1)
	go func() { // ends when Recv fails, which it does once the handler returned
		defer v.s.wg.Done()
		read <- fs.read()
	}()
	var err error
	drain := true // wait until the commands started are answered
	select {
	case err = <-read: // io.EOF: the follower is done sending
		drain = errors.Is(err, io.EOF)
	case <-v.s.stopping:
	case <-fs.broken:
		drain = false
	}
	fs.mu.Lock()
	fs.closed = true // no command starts after this
	fs.mu.Unlock()
	if drain {
		fs.running.Wait() // each answer is sent, or the stream broke
	}
	fs.sendMu.Lock()
	fs.ended = true // Send is not called after the handler returns
	sendErr := fs.sendErr
	fs.sendMu.Unlock()
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return err
	case sendErr != nil:
		return sendErr
	}
	return nil
}

// fwdServerStream is the leader's side of one ForwardStream.
type fwdServerStream struct {
	v      *service
	stream concordv1.Cluster_ForwardStreamServer
	ctx    context.Context
	slots  chan struct{} // one per command started and not yet answered

	mu      sync.Mutex
	closed  bool           // the handler is returning: start nothing more
	running sync.WaitGroup // commands started

	outMu sync.Mutex
	out   []*concordv1.ForwardItemReply // answers waiting to be sent

	sendMu  sync.Mutex // held while sending; guards the fields below
	sendErr error
	ended   bool
	broken  chan struct{} // closed when a Send fails
}

// read receives batches and starts their commands until Recv fails (or
// the handler closed the stream for new commands).
func (fs *fwdServerStream) read() error {
	var origin string
	for {
		b, err := fs.stream.Recv()
		if err != nil {
			return err
		}
		if origin == "" {
			origin = b.GetOriginNodeId()
			fs.v.s.log.Debug("forward stream from peer", "peer", origin)
		}
		for _, it := range b.GetItems() {
			select {
			case fs.slots <- struct{}{}:
			case <-fs.ctx.Done():
				return fs.ctx.Err()
			}
			fs.mu.Lock()
			if fs.closed {
				fs.mu.Unlock()
				<-fs.slots
				return nil
			}
			fs.running.Add(1)
			fs.v.s.wg.Add(1) // Shutdown waits for it, also past the handler
			fs.mu.Unlock()
			from := origin
			go func() {
				defer fs.v.s.wg.Done()
				defer fs.running.Done()
				fs.answer(fs.v.forwardItem(fs.ctx, from, it))
			}()
		}
	}
}

// answer queues rep and sends what is queued, unless another goroutine is
// sending: that one sends it after its current batch.
func (fs *fwdServerStream) answer(rep *concordv1.ForwardItemReply) {
	fs.outMu.Lock()
	fs.out = append(fs.out, rep)
	fs.outMu.Unlock()
	for {
		if !fs.sendMu.TryLock() {
			return
		}
		fs.outMu.Lock()
		n := min(len(fs.out), maxRepliesPerBatch)
		batch := &concordv1.ForwardBatchReply{Replies: append([]*concordv1.ForwardItemReply(nil), fs.out[:n]...)}
		fs.out = fs.out[:copy(fs.out, fs.out[n:])]
		left := len(fs.out)
		fs.outMu.Unlock()
		if n > 0 && !fs.ended && fs.sendErr == nil {
			if err := fs.stream.Send(batch); err != nil {
				fs.sendErr = err
				close(fs.broken)
			}
		}
		for range n {
			<-fs.slots
		}
		fs.sendMu.Unlock()
		if left == 0 && !fs.pending() {
			return
		}
	}
}

// pending reports answers waiting to be sent.
func (fs *fwdServerStream) pending() bool {
	fs.outMu.Lock()
	defer fs.outMu.Unlock()
	return len(fs.out) > 0
}

// forwardItem runs one command of a stream within the deadline the
// follower passed on, and builds its answer.
func (v *service) forwardItem(ctx context.Context, origin string, it *concordv1.ForwardItem) *concordv1.ForwardItemReply {
	if ms := it.GetTimeoutMs(); ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	rep := &concordv1.ForwardItemReply{Id: it.GetId()}
	reply, err := v.s.deps.Store.ApplyForwardedFrom(ctx, origin, it.GetCommand())
	if err != nil {
		v.s.log.Debug("forwarded command refused", "peer", origin, "err", err)
		st := status.Convert(v.s.storeStatus(err))
		rep.Error = &concordv1.ForwardItemError{Code: uint32(st.Code()), Message: st.Message(), Detail: forwardErrorOf(st)}
		return rep
	}
	rep.Index, rep.Result = reply.Index, encodedResult(reply)
	return rep
}

// encodedResult is the result field of a Forward answer: nil when the
// module encoded none, else the bytes (empty is a valid encoding).
func encodedResult(reply raftstore.ForwardReply) []byte {
	if !reply.HasResult {
		return nil
	}
	if reply.Result == nil {
		return []byte{}
	}
	return reply.Result
}
