package cluster

import (
	"context"
	"errors"
	"io"
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
// At most Config.ForwardStreamMaxInFlight commands of a stream run at a
// time; the handler reads the next batch only when all of the last one
// started, so a follower that sends faster is held by flow control.
// On Shutdown it takes no more commands and returns once those started
// are answered (the follower fails the rest as "outcome unknown").
func (v *service) ForwardStream(stream concordv1.Cluster_ForwardStreamServer) error {
	ctx := stream.Context()
	in := receive(ctx, v.s, stream.Recv)
	limit := v.s.cfg.ForwardStreamMaxInFlight
	replies := make(chan *concordv1.ForwardItemReply, limit) // never full: one per command running
	var pending []*concordv1.ForwardItem
	var origin string
	running, draining, stopping := 0, false, v.s.stopping
	for {
		for len(pending) > 0 && running < limit {
			it, from := pending[0], origin
			pending[0], pending = nil, pending[1:]
			running++
			v.s.wg.Add(1)
			go func() {
				defer v.s.wg.Done()
				replies <- v.forwardItem(ctx, from, it)
			}()
		}
		if draining && running == 0 {
			return nil
		}
		recv := in
		if draining || len(pending) > 0 {
			recv = nil
		}
		select {
		case <-stopping:
			stopping, draining, pending = nil, true, nil
		case r := <-recv:
			switch {
			case errors.Is(r.err, io.EOF):
				draining = true
			case r.err != nil:
				return r.err
			default:
				pending = r.msg.GetItems()
				if origin == "" {
					origin = r.msg.GetOriginNodeId()
					v.s.log.Debug("forward stream from peer", "peer", origin)
				}
			}
		case rep := <-replies:
			out := &concordv1.ForwardBatchReply{Replies: []*concordv1.ForwardItemReply{rep}}
		more:
			for len(out.Replies) < maxRepliesPerBatch {
				select {
				case rep := <-replies:
					out.Replies = append(out.Replies, rep)
				default:
					break more
				}
			}
			running -= len(out.Replies)
			if err := stream.Send(out); err != nil {
				return err
			}
		}
	}
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
	reply, err := v.s.deps.Store.ApplyForwarded(ctx, it.GetCommand())
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
