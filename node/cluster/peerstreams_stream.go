package cluster

import (
	"errors"
	"fmt"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// sendAll sends pending items in batches while the in-flight window has
// room, and returns what is left. An error means the stream is broken.
func (ps *peerSender) sendAll(st *relayStream, pending []*item) ([]*item, error) {
	cfg := &ps.r.cfg
	sent := 0
	for sent < len(pending) {
		room := ps.room()
		if room == 0 {
			break
		}
		n, bytes := 0, 0
		for sent+n < len(pending) && n < cfg.RelayMaxBatch && n < room && bytes < cfg.RelayMaxBatchBytes {
			bytes += len(pending[sent+n].msg)
			n++
		}
		if err := ps.sendBatch(st, pending[sent:sent+n]); err != nil {
			return compact(pending, sent+n), err
		}
		sent += n
	}
	return compact(pending, sent), nil
}

// compact drops the first n items of pending, reusing its array.
func compact(pending []*item, n int) []*item {
	if n == 0 {
		return pending
	}
	rest := copy(pending, pending[n:])
	clear(pending[rest:])
	return pending[:rest]
}

// sendBatch numbers items, records them in flight (before sending, so a
// fast ack finds them) and writes one RelayBatch.
func (ps *peerSender) sendBatch(st *relayStream, items []*item) error {
	now := time.Now()
	envs := make([]concordv1.RelayEnvelope, len(items))
	ptrs := make([]*concordv1.RelayEnvelope, len(items))
	ps.mu.Lock()
	for i, it := range items {
		it.sent = now
		e := &envs[i]
		e.Seq, e.Kind, e.Message = st.nextSeq, it.kind, it.msg
		e.RecipientAgentId, e.RecipientSessionId, e.Event = it.agentID, it.sessionID, it.event
		ptrs[i] = e
		ps.inflight.push(it, st.nextSeq)
		st.nextSeq++
	}
	// Send blocks when the peer stops reading (HTTP/2 flow control), and
	// this goroutine is also the one that expires items: a watchdog aborts
	// the stream once the oldest envelope in flight is past its deadline.
	wait := time.Until(ps.inflight.peek().deadline)
	ps.mu.Unlock()
	wd := time.AfterFunc(min(max(wait, 0), ps.r.cfg.RelayDeliveryTimeout), st.cancel)
	defer wd.Stop()
	return st.stream.Send(&concordv1.RelayBatch{FromNodeId: ps.r.cfg.NodeID, Envelopes: ptrs})
}

// receive is the stream's receiver goroutine: it completes acknowledged
// items until the stream ends.
func (ps *peerSender) receive(st *relayStream) {
	defer ps.r.wg.Done()
	defer close(st.done)
	var done []*item
	var errs []error
	for {
		ack, err := st.stream.Recv()
		if err != nil {
			st.err = err
			return
		}
		done, errs = ps.onAck(ack, done[:0], errs[:0])
		for i, it := range done {
			it.complete(errs[i])
		}
		clear(done)
		select {
		case ps.acked <- struct{}{}:
		default:
		}
	}
}

// onAck takes the acknowledged items off the window and pairs each with its
// outcome. It returns them for completion outside the lock.
func (ps *peerSender) onAck(ack *concordv1.RelayAck, done []*item, errs []error) ([]*item, []error) {
	var failed map[uint64]*concordv1.RelayFailure
	if fs := ack.GetFailures(); len(fs) > 0 {
		failed = make(map[uint64]*concordv1.RelayFailure, len(fs))
		for _, f := range fs {
			failed[f.GetSeq()] = f
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for ps.inflight.n > 0 && ps.inflight.firstSeq <= ack.GetUpToSeq() {
		seq := ps.inflight.firstSeq
		it := ps.inflight.pop()
		if it.finished {
			continue
		}
		it.finished = true
		var err error
		if f := failed[seq]; f != nil {
			err = &DeliveryError{Code: f.GetCode(), Reason: f.GetReason()}
		}
		done, errs = append(done, it), append(errs, err)
	}
	return done, errs
}

// broken ends st and fails what it had in flight. Whether those envelopes
// reached the recipient is unknown; they are not re-sent (at-most-once).
func (ps *peerSender) broken(st *relayStream, cause error) {
	st.cancel()
	<-st.done
	ps.mu.Lock()
	var lost []*item
	for ps.inflight.n > 0 {
		if it := ps.inflight.pop(); !it.finished {
			it.finished = true
			lost = append(lost, it)
		}
	}
	ps.mu.Unlock()
	err := fmt.Errorf("relay to %s: %w: stream broken: %w", ps.id, ErrDeliveryTimeout, cause)
	for _, it := range lost {
		it.complete(err)
	}
	ps.log.Debug("relay stream closed", "lost", len(lost), "err", cause)
}

// expire fails the pending items whose deadline passed, and in-flight ones
// too (their ack may still come; it is then ignored).
func (ps *peerSender) expire(pending []*item, st *relayStream, now time.Time) []*item {
	cause := ErrDeliveryTimeout
	if st == nil {
		cause = ErrPeerUnavailable // never got a stream to send it on
	}
	keep := pending[:0]
	for _, it := range pending {
		if now.After(it.deadline) {
			it.complete(fmt.Errorf("relay to %s: %w: deadline passed before sending", ps.id, cause))
			continue
		}
		keep = append(keep, it)
	}
	clear(pending[len(keep):])
	var late []*item
	ps.mu.Lock()
	ps.inflight.each(func(it *item) {
		if !it.finished && now.After(it.deadline) {
			it.finished = true
			late = append(late, it)
		}
	})
	ps.mu.Unlock()
	for _, it := range late {
		it.complete(fmt.Errorf("relay to %s: %w", ps.id, ErrDeliveryTimeout))
	}
	return keep
}

// stalled reports that the oldest unacknowledged envelope has waited longer
// than the delivery timeout: the peer (or the path to it) is not working
// even though the stream has not failed.
func (ps *peerSender) stalled(now time.Time) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.inflight.n > 0 && now.Sub(ps.inflight.peek().sent) > ps.r.cfg.RelayDeliveryTimeout
}

func (ps *peerSender) inflightLen() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.inflight.n
}

func (ps *peerSender) room() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.inflight.buf) - ps.inflight.n
}

// shutdown runs when the sender exits: the stream is closed and everything
// still held fails with ErrClosed (nothing is held after an idle exit).
func (ps *peerSender) shutdown(st *relayStream, pending []*item) {
	if st != nil {
		ps.broken(st, ErrClosed)
	}
	failAll(pending, ErrClosed)
	for {
		select {
		case it := <-ps.queue:
			it.complete(ErrClosed)
		default:
			return
		}
	}
}

// failAll completes every item with err and returns the emptied slice.
func failAll(items []*item, err error) []*item {
	for _, it := range items {
		it.complete(err)
	}
	clear(items)
	return items[:0]
}

// ring is the in-flight window: a FIFO of items with consecutive seqs.
type ring struct {
	buf      []*item
	head, n  int
	firstSeq uint64 // seq of buf[head] when n > 0
}

func newRing(size int) ring { return ring{buf: make([]*item, size)} }

func (r *ring) push(it *item, seq uint64) {
	if r.n == len(r.buf) {
		panic(errors.New("cluster: relay window overflow")) // sendAll never exceeds room()
	}
	if r.n == 0 {
		r.firstSeq = seq
	}
	r.buf[(r.head+r.n)%len(r.buf)] = it
	r.n++
}

func (r *ring) pop() *item {
	it := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.firstSeq++
	return it
}

func (r *ring) peek() *item { return r.buf[r.head] }

func (r *ring) each(f func(*item)) {
	for i := range r.n {
		f(r.buf[(r.head+i)%len(r.buf)])
	}
}
