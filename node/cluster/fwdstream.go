package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// A forwarded write on a ForwardStream goes through these states, all
// changed under fwdStream.mu; whoever moves a request to reqDone (or drops
// an abandoned one) frees its slot, so a stream never holds more than
// Config.ForwardStreamQueue requests.
type reqState uint8

const (
	reqQueued    reqState = iota // waiting for the sender goroutine
	reqSent                      // in a batch on the wire, in fwdStream.inflight
	reqDone                      // its outcome is in done
	reqAbandoned                 // its caller stopped waiting (deadline)
)

// fwdReq is one forwarded command on a stream.
type fwdReq struct {
	cmd      []byte
	deadline time.Time // its attempt's (at most the caller's); zero only in tests
	id       uint64
	state    reqState
	done     chan fwdOutcome // capacity 1, written once
}

// fwdOutcome is how a request ended: the leader's answer, or the failure
// of its stream (err, with sent saying whether the leader may have seen it).
type fwdOutcome struct {
	reply *concordv1.ForwardItemReply
	err   error
	sent  bool
}

// errStreamUnsupported: the node answered ForwardStream with UNIMPLEMENTED
// (an older version), so it never ran the commands; use Forward instead.
var errStreamUnsupported = errors.New("forward stream not supported by the peer")

// unsupportedRecheck is how long a node that answered UNIMPLEMENTED gets
// unary Forward calls before a stream is tried again (it may have been
// upgraded meanwhile).
const unsupportedRecheck = time.Minute

// fwdStream is one ForwardStream from this node to one other node (the
// leader, as the callers see it). Its goroutine (run) opens the gRPC
// stream; then each writer sends what is queued when it queues its own
// request, as one batch (bounded by ForwardStreamMaxBatch and
// ForwardStreamMaxBatchBytes), unless another writer is sending, which
// then takes it along with the next batch (flush). Its receiver goroutine
// (receive) matches the answers to the requests by id.
// A stream that breaks fails every request it holds (fail) and is not
// reused: the next write opens a new one, to whichever node then leads.
type fwdStream struct {
	f            *Forwarder
	target, addr string
	ctx          context.Context // the gRPC stream's life
	cancel       context.CancelFunc
	slots        chan struct{} // one per request held: the bound on queue + in flight
	sendFailed   chan struct{} // capacity 1: a Send failed, the stream is over

	sendMu sync.Mutex // held while sending (gRPC: one Send at a time)

	mu         sync.Mutex
	stream     concordv1.Cluster_ForwardStreamClient // nil until open
	queue      []*fwdReq
	inflight   map[uint64]*fwdReq
	nextID     uint64
	active     bool // a request came since the last idle check
	dead       bool // failed or retired: takes no more requests
	sendBroken bool // a Send failed: nothing more is sent
}

func newFwdStream(f *Forwarder, target, addr string) *fwdStream {
	ctx, cancel := context.WithCancel(f.life)
	return &fwdStream{
		f: f, target: target, addr: addr, ctx: ctx, cancel: cancel,
		slots:      make(chan struct{}, f.cfg.ForwardStreamQueue),
		sendFailed: make(chan struct{}, 1),
		inflight:   make(map[uint64]*fwdReq),
		active:     true,
	}
}

// streamAttempt is attempt over the ForwardStream to target. fallback
// says that target does not serve the stream: nothing was run, send the
// command with Forward instead.
func (f *Forwarder) streamAttempt(ctx context.Context, target, addr string, cmd []byte) (reply raftstore.ForwardReply, next string, err error, retry, fallback bool) {
	// The request's deadline is its attempt's: the caller stops waiting
	// then (the timer below) and answers its own caller. The leader gets
	// only what is left of it, and a request still queued at that point is
	// never sent: it must not commit after its caller was told it failed.
	r := &fwdReq{cmd: cmd, done: make(chan fwdOutcome, 1), deadline: time.Now().Add(f.cfg.ForwardAttemptTimeout)}
	if d, ok := ctx.Deadline(); ok && d.Before(r.deadline) {
		r.deadline = d
	}
	var s *fwdStream
	for tries := 0; ; tries++ {
		if s, err = f.streamTo(target, addr); err != nil {
			return reply, "", err, false, false // ErrClosed
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return reply, "", fmt.Errorf("forward to %s: waiting for room on the stream: %w: %w", target, raftstore.ErrTimeout, ctx.Err()), false, false
		}
		if ctx.Err() != nil { // both were ready: select picked at random
			<-s.slots
			return reply, "", fmt.Errorf("forward to %s: %w: %w", target, raftstore.ErrTimeout, ctx.Err()), false, false
		}
		if s.enqueue(r) {
			break
		}
		<-s.slots // the stream ended meanwhile (idle, or broken): take a new one
		if tries == 2 {
			return reply, "", fmt.Errorf("forward stream to %s keeps closing", target), true, false
		}
	}
	timer := time.NewTimer(f.cfg.ForwardAttemptTimeout)
	defer timer.Stop()
	var out fwdOutcome
	select {
	case out = <-r.done:
	case <-ctx.Done():
		if o, done, _ := s.abandon(r); done {
			out = o
			break
		}
		return reply, "", fmt.Errorf("forward to %s: %w: %w", target, raftstore.ErrTimeout, ctx.Err()), false, false
	case <-timer.C:
		o, done, sent := s.abandon(r)
		switch {
		case done:
			out = o
		case sent:
			// As for a unary call cut off by its attempt timeout: the
			// leader may have proposed it, never retry.
			return reply, "", fmt.Errorf("no answer from leader %s within %v: %w: %w", target,
				f.cfg.ForwardAttemptTimeout, raftstore.ErrLeadershipLost, raftstore.ErrTimeout), false, false
		default:
			return reply, "", fmt.Errorf("forward stream to %s: not sent within %v", target, f.cfg.ForwardAttemptTimeout), true, false
		}
	}
	return f.outcome(ctx, target, out)
}

// outcome turns a request's end into attempt's results.
func (f *Forwarder) outcome(ctx context.Context, target string, out fwdOutcome) (reply raftstore.ForwardReply, next string, err error, retry, fallback bool) {
	if out.err != nil {
		switch {
		case errors.Is(out.err, errStreamUnsupported):
			return reply, "", out.err, false, true
		case out.sent:
			if ctx.Err() != nil {
				return reply, "", fmt.Errorf("forward to %s: %w: %w", target, raftstore.ErrTimeout, ctx.Err()), false, false
			}
			return reply, "", out.err, false, false
		default:
			return reply, "", out.err, !errors.Is(out.err, ErrClosed), false
		}
	}
	rep := out.reply
	if e := rep.GetError(); e != nil {
		next, err, retry = f.classify(ctx, target, itemStatus(e))
		f.log.Debug("forwarded command failed", "leader_id", target, "retry", retry, "err", err)
		return reply, next, err, retry, false
	}
	return raftstore.ForwardReply{Index: rep.GetIndex(), Result: rep.GetResult(), HasResult: rep.Result != nil}, "", nil, false, false
}

// itemStatus rebuilds the gRPC error a unary Forward would have returned.
func itemStatus(e *concordv1.ForwardItemError) error {
	code := codes.Code(e.GetCode())
	if code == codes.OK {
		code = codes.Unknown // an error without a code: not the leader's word
	}
	st := status.New(code, e.GetMessage())
	if d := e.GetDetail(); d != nil {
		if withDetail, err := st.WithDetails(d); err == nil {
			st = withDetail
		}
	}
	return st.Err()
}

// enqueue queues r; false when the stream takes no more requests.
func (s *fwdStream) enqueue(r *fwdReq) bool {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, r)
	s.active = true
	open := s.stream != nil
	s.mu.Unlock()
	if open {
		s.flush()
	}
	return true
}

// abandon is called when r's caller stops waiting. done: r already has
// its outcome (returned). Otherwise r is taken off the stream (a queued
// one is dropped by the sender; an answer to a sent one is ignored) and
// sent says whether it was on the wire.
func (s *fwdStream) abandon(r *fwdReq) (out fwdOutcome, done, sent bool) {
	s.mu.Lock()
	switch r.state {
	case reqDone:
		s.mu.Unlock()
		return <-r.done, true, false
	case reqQueued:
		r.state = reqAbandoned
		s.mu.Unlock()
		return out, false, false
	default: // reqSent
		delete(s.inflight, r.id)
		r.state = reqAbandoned
		s.mu.Unlock()
		<-s.slots
		return out, false, true
	}
}

// takeBatch moves the next batch from the queue to inflight and returns
// it as wire items (nil when nothing is queued), and the shortest deadline
// among them. Abandoned requests are dropped on the way, and so are those
// whose deadline passed (failed as never sent: their callers are giving up
// now, and the leader must not run them after). Call with s.mu held.
func (s *fwdStream) takeBatch() (items []*concordv1.ForwardItem, wait time.Duration) {
	cfg := &s.f.cfg
	n, bytes := 0, 0
	wait = cfg.ForwardAttemptTimeout
	for ; n < len(s.queue) && len(items) < cfg.ForwardStreamMaxBatch; n++ {
		r := s.queue[n]
		if r.state == reqAbandoned {
			<-s.slots
			continue
		}
		d := s.timeout(r)
		if d <= 0 {
			r.state = reqDone
			r.done <- fwdOutcome{err: fmt.Errorf("forward stream to %s: deadline passed before sending: %w", s.target, raftstore.ErrTimeout)}
			<-s.slots
			continue
		}
		if len(items) > 0 && bytes+len(r.cmd) > cfg.ForwardStreamMaxBatchBytes {
			break
		}
		bytes += len(r.cmd)
		s.nextID++
		r.id, r.state = s.nextID, reqSent
		s.inflight[r.id] = r
		wait = min(wait, d)
		ms := max((d+time.Millisecond-1)/time.Millisecond, 1) // rounded up, never "none"
		items = append(items, &concordv1.ForwardItem{Id: r.id, Command: r.cmd, TimeoutMs: uint32(ms)})
	}
	s.queue = slices.Delete(s.queue, 0, n)
	return items, wait
}

// timeout is the deadline the leader gets for r: what is left of its
// attempt's, at most ForwardAttemptTimeout (a unary Forward's deadline).
func (s *fwdStream) timeout(r *fwdReq) time.Duration {
	d := s.f.cfg.ForwardAttemptTimeout
	if !r.deadline.IsZero() {
		d = min(d, time.Until(r.deadline))
	}
	return d
}

// complete hands the leader's answer to its request, unless the caller
// gave up on it.
func (s *fwdStream) complete(rep *concordv1.ForwardItemReply) {
	s.mu.Lock()
	r, ok := s.inflight[rep.GetId()]
	if ok {
		delete(s.inflight, r.id)
		r.state = reqDone
	}
	s.mu.Unlock()
	if ok {
		r.done <- fwdOutcome{reply: rep}
		<-s.slots
	}
}

// fail ends the stream because of cause: it takes no more requests, and
// every request it holds fails as a broken unary call would. Requests on
// the wire may have been proposed: ErrLeadershipLost ("outcome unknown").
// Queued ones were never sent: retryable, so they go to whichever node
// leads next. UNIMPLEMENTED means the peer ran nothing: every request
// falls back to Forward.
func (s *fwdStream) fail(cause error) {
	s.mu.Lock()
	s.dead = true
	queued, inflight := s.queue, s.inflight
	s.queue, s.inflight = nil, make(map[uint64]*fwdReq)
	var ended []*fwdReq
	for _, r := range queued {
		if r.state == reqAbandoned {
			<-s.slots
			continue
		}
		r.state = reqDone
		ended = append(ended, r)
	}
	for _, r := range inflight {
		r.state = reqDone
		ended = append(ended, r)
	}
	s.mu.Unlock()
	s.f.dropStream(s)
	if len(ended) == 0 {
		return
	}
	sentErr, unsentErr := s.failure(cause)
	for _, r := range ended {
		sent := r.id != 0
		err := unsentErr
		if sent {
			err = sentErr
		}
		r.done <- fwdOutcome{err: err, sent: sent}
		<-s.slots
	}
}

// failure gives the errors of the requests a stream failing with cause
// held: those on the wire, and those still queued.
func (s *fwdStream) failure(cause error) (sent, unsent error) {
	st := status.Convert(cause)
	switch {
	case st.Code() == codes.Unimplemented:
		s.f.markUnsupported(s.target)
		s.f.log.Info("leader does not serve ForwardStream; forwarding with unary calls", "leader_id", s.target)
		return errStreamUnsupported, errStreamUnsupported
	case s.f.life.Err() != nil:
		return fmt.Errorf("forward to %s: forwarder closed: outcome unknown: %w", s.target, raftstore.ErrLeadershipLost),
			fmt.Errorf("forward to %s: %w", s.target, ErrClosed)
	}
	s.f.log.Debug("forward stream ended", "leader_id", s.target, "err", cause)
	return fmt.Errorf("forward to %s: outcome unknown: stream broke: %s: %w", s.target, st.Message(), raftstore.ErrLeadershipLost),
		fmt.Errorf("forward stream to %s broke before the command was sent: %s", s.target, st.Message())
}
