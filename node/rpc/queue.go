package rpc

import (
	"context"
	"sync"
)

// sendQueue is a connection's bounded outbound queue. Producers (any
// goroutine) append under mu; the single writer goroutine swaps the whole
// slice out, so one wake-up drains a burst into one buffered write.
type sendQueue struct {
	maxLen      int
	maxBytes    int64
	notifyBytes int64 // tryPut's (notifications') byte bound, <= maxBytes

	mu      sync.Mutex
	frames  []*frame
	bytes   int64
	closed  bool
	spaceCh chan struct{} // closed and replaced when the writer frees room; nil if nobody waits

	wake chan struct{} // cap 1: "there is something to write"
}

func newSendQueue(maxLen int, maxBytes, notifyBytes int64) *sendQueue {
	return &sendQueue{maxLen: maxLen, maxBytes: maxBytes, notifyBytes: min(notifyBytes, maxBytes), frames: make([]*frame, 0, 64), wake: make(chan struct{}, 1)}
}

// tryPut enqueues f without blocking. On failure the caller still owns f.
func (q *sendQueue) tryPut(f *frame) error {
	q.mu.Lock()
	var err error
	if len(q.frames) > 0 && q.bytes+int64(len(f.b)) > q.notifyBytes {
		err = ErrSlowConsumer
	} else {
		err = q.putLocked(f)
	}
	q.mu.Unlock()
	if err == nil {
		q.signal()
	}
	return err
}

// forcePut enqueues f past the length and byte bounds (only a closed queue
// refuses it). It is for deferred replies, whose number Config.MaxDeferred
// bounds already and which must not block the goroutine completing them.
func (q *sendQueue) forcePut(f *frame) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.frames = append(q.frames, f)
	q.bytes += int64(len(f.b))
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *sendQueue) putLocked(f *frame) error {
	switch {
	case q.closed:
		return ErrClosed
	case len(q.frames) > 0 && (len(q.frames) >= q.maxLen || q.bytes+int64(len(f.b)) > q.maxBytes):
		return ErrSlowConsumer
	}
	q.frames = append(q.frames, f)
	q.bytes += int64(len(f.b))
	return nil
}

// put enqueues f, waiting for room while the queue is full. It gives up with
// ErrClosed when the queue closes and with ctx.Err() when ctx is done. On
// failure the caller still owns f.
func (q *sendQueue) put(ctx context.Context, f *frame) error {
	for {
		q.mu.Lock()
		err := q.putLocked(f)
		if err != ErrSlowConsumer {
			q.mu.Unlock()
			if err == nil {
				q.signal()
			}
			return err
		}
		if q.spaceCh == nil {
			q.spaceCh = make(chan struct{})
		}
		ch := q.spaceCh
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *sendQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take hands every queued frame to the writer, swapping in spare (an empty
// slice the writer owns) so the steady state allocates nothing.
func (q *sendQueue) take(spare []*frame) []*frame {
	q.mu.Lock()
	out := q.frames
	q.frames = spare[:0]
	q.bytes = 0
	if q.spaceCh != nil {
		close(q.spaceCh)
		q.spaceCh = nil
	}
	q.mu.Unlock()
	return out
}

// close refuses further frames and wakes every waiting producer.
func (q *sendQueue) close() {
	q.mu.Lock()
	q.closed = true
	if q.spaceCh != nil {
		close(q.spaceCh)
		q.spaceCh = nil
	}
	q.mu.Unlock()
	q.signal()
}

// drop releases frames that will never be written.
func (q *sendQueue) drop() {
	for _, f := range q.take(nil) {
		putFrame(f)
	}
}
