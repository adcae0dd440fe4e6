package rpc

import (
	"context"
	"sync"
)

// sendQueue is a connection's bounded outbound queue. Producers (any
// goroutine) append under mu; the writer swaps the whole slice out, so one
// wake-up drains a burst into one buffered write.
//
// The writer goroutine runs only while there is work: the first frame put
// into an idle queue (or a ping, or the close) starts it through startWriter,
// and it exits once it finds the queue empty (writerIdle). An idle
// connection therefore holds no writer goroutine and no stack for it, and at
// most one writer runs at a time.
type sendQueue struct {
	maxLen      int
	maxBytes    int64
	notifyBytes int64 // tryPut's (notifications') byte bound, <= maxBytes
	// startWriter runs the writer on a new goroutine; set before first use.
	startWriter func()

	mu      sync.Mutex
	frames  []*frame
	bytes   int64
	closed  bool
	spaceCh chan struct{} // closed and replaced when the writer frees room; nil if nobody waits
	// writing: a writer goroutine is running, or the writer has finished
	// for good (then it stays true, so no other one starts).
	writing bool
	pingDue bool // a keepalive ping waits for the writer
}

func newSendQueue(maxLen int, maxBytes, notifyBytes int64) *sendQueue {
	return &sendQueue{maxLen: maxLen, maxBytes: maxBytes, notifyBytes: min(notifyBytes, maxBytes)}
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
	start := err == nil && q.kickLocked()
	q.mu.Unlock()
	if start {
		q.startWriter()
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
	start := q.kickLocked()
	q.mu.Unlock()
	if start {
		q.startWriter()
	}
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
	start, err := q.putHeld(ctx, f)
	if start {
		q.startWriter()
	}
	return err
}

// putHeld is put without starting the writer: run reports that no writer
// was running and the caller has become it (it must drain the queue and
// then call writerIdle, or start one).
func (q *sendQueue) putHeld(ctx context.Context, f *frame) (run bool, err error) {
	for {
		q.mu.Lock()
		err := q.putLocked(f)
		if err != ErrSlowConsumer {
			run := err == nil && q.kickLocked()
			q.mu.Unlock()
			return run, err
		}
		if q.spaceCh == nil {
			q.spaceCh = make(chan struct{})
		}
		ch := q.spaceCh
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// signal makes sure a writer will see what was just queued: it starts one
// unless one is running (a running writer checks the queue again before it
// exits).
func (q *sendQueue) signal() {
	q.mu.Lock()
	start := q.kickLocked()
	q.mu.Unlock()
	if start {
		q.startWriter()
	}
}

// kickLocked marks the writer running and reports whether the caller must
// start it (after unlocking).
func (q *sendQueue) kickLocked() bool {
	if q.writing {
		return false
	}
	q.writing = true
	return true
}

// requestPing asks the writer for a keepalive ping.
func (q *sendQueue) requestPing() {
	q.mu.Lock()
	q.pingDue = true
	q.mu.Unlock()
	q.signal()
}

// writerIdle is the writer's exit check, after a drain found nothing more to
// write: it reports what to do next. next: frames, a ping or the close are
// waiting (keep going). finish: the queue is closed and empty (say goodbye;
// the writer never restarts). Otherwise the writer is marked stopped and
// must exit; the next signal starts another.
func (q *sendQueue) writerIdle() (next, finish bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case len(q.frames) > 0 || q.pingDue:
		return true, false
	case q.closed:
		return false, true
	}
	q.writing = false
	return false, false
}

// takePing reports (and clears) a pending ping request.
func (q *sendQueue) takePing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	due := q.pingDue
	q.pingDue = false
	return due
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
