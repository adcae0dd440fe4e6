package federation

import (
	"context"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Sending on an idle link: a message that finds the stream up, nothing
// queued before it and nothing awaiting an ack is written by the sender's
// own goroutine (sendNow) instead of waking the link's send loop. On a
// request/reply path with idle gaps (a WAN round trip) every goroutine
// hand-off wakes a parked thread; this one cost ~50 µs per message on the
// WAN benchmark (PERFORMANCE.md). Busy links keep batching in the loop.

// inlineMaxBytes bounds a message sent inline. With nothing in flight the
// stream's gRPC flow-control window (64 KiB at least) and write quota are
// free, so a Send of this size returns without waiting on the network,
// as Manager.Send promises its callers.
const inlineMaxBytes = 16 << 10

// idleFor reports whether it, just queued, may be sent inline: a stream
// is up, it is alone in the queue and no earlier message awaits its ack.
// l.mu held.
func (l *outLink) idleFor(it *item) bool {
	return l.cur != nil && len(l.buf.items) == 1 && len(l.inflight) == 0 && it.size <= inlineMaxBytes
}

// sendNow writes what is queued on the current stream from the caller's
// goroutine. When another writer holds the stream, or the stream went
// away meanwhile, it leaves the queue to the send loop.
func (l *outLink) sendNow() {
	if !l.sendMu.TryLock() {
		l.signal() // the writer may be past its last look at the queue
		return
	}
	defer l.sendMu.Unlock()
	l.mu.Lock()
	stream, cancel := l.cur, l.curCancel
	var batch *concordv1.FedBatch
	if stream != nil {
		batch, _ = l.nextBatch(l.m.now())
	}
	l.mu.Unlock()
	if batch == nil || len(batch.Envelopes) == 0 {
		l.signal()
		return
	}
	if err := stream.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Batch{Batch: batch}}); err != nil {
		// The stream broke: its session ends, and the envelopes now in
		// flight answer 5000 like any others lost with it.
		l.log.Debug("federation inline send", "err", err)
		cancel()
	}
}

// nextBatch numbers up to maxBatch queued envelopes (at most
// maxBatchBytes; one goes alone whatever its size) for the current
// stream and moves them in flight; bytes is their size. l.mu held, and
// sendMu until the batch was written.
func (l *outLink) nextBatch(now time.Time) (batch *concordv1.FedBatch, bytes int) {
	n := min(len(l.buf.items), maxBatch)
	batch = &concordv1.FedBatch{Envelopes: make([]*concordv1.FedEnvelope, 0, n)}
	for i := range n {
		if i > 0 && bytes+l.buf.items[0].size > maxBatchBytes {
			n = i
			break
		}
		it := l.buf.popFront()
		bytes += it.size
		l.seq++
		env := it.env // the link owns it now: numbered for this stream
		env.Seq = l.seq
		l.inflight[l.seq] = &inflight{it: it, sentAt: now}
		batch.Envelopes = append(batch.Envelopes, env)
	}
	l.sent += uint64(n)
	return batch, bytes
}

// sendFrame writes one control frame (ping, directory request) on stream.
func (l *outLink) sendFrame(stream concordv1.Federation_LinkClient, f *concordv1.FedFrame) error {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	return stream.Send(f)
}

// attach makes stream, just up, the one inline sends use; cancel ends
// its session.
func (l *outLink) attach(stream concordv1.Federation_LinkClient, cancel context.CancelFunc) {
	l.mu.Lock()
	l.cur, l.curCancel = stream, cancel
	l.mu.Unlock()
}

// detach stops inline sends on the current stream (its session ends).
func (l *outLink) detach() {
	l.mu.Lock()
	l.cur, l.curCancel = nil, nil
	l.mu.Unlock()
}
