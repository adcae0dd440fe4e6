package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// item is one envelope on its way to a peer, with its completion.
type item struct {
	kind      concordv1.RelayKind
	msg       []byte
	agentID   string
	sessionID string
	event     *concordv1.RelayEvent
	deadline  time.Time
	sent      time.Time // when its batch went out

	ch   chan error  // Send's completion (buffered 1), or
	done func(error) // Submit's; both nil for events

	// finished is set once the item is completed while in flight, so a
	// late ack does not complete it twice. Guarded by peerSender.mu.
	finished bool
}

func (it *item) complete(err error) {
	switch {
	case it.ch != nil:
		it.ch <- err
	case it.done != nil:
		it.done(err)
	}
}

// peerSender owns the queue, the stream and the in-flight window to one
// peer. Its run goroutine is the only one that sends; the stream's
// receiver goroutine completes acknowledged items.
type peerSender struct {
	r     *PeerStreams
	id    string
	log   *slog.Logger
	queue chan *item
	acked chan struct{} // capacity 1: window space was freed

	// enqueuers counts callers about to put an item on queue (see
	// PeerStreams.acquire); the sender stays while it is > 0.
	enqueuers atomic.Int64

	mu       sync.Mutex
	inflight ring // items sent and not yet acknowledged, by seq
}

func newPeerSender(r *PeerStreams, id string) *peerSender {
	return &peerSender{
		r: r, id: id, log: r.log.With("peer", id),
		queue:    make(chan *item, r.cfg.RelayQueueSize),
		acked:    make(chan struct{}, 1),
		inflight: newRing(r.cfg.RelayMaxInFlight),
	}
}

// relayStream is one open Cluster.Relay stream and its receiver goroutine.
type relayStream struct {
	stream  concordv1.Cluster_RelayClient
	cancel  context.CancelFunc
	done    chan struct{} // closed when the receiver goroutine has exited
	err     error         // why it exited; read after done
	nextSeq uint64
}

// run is the sender goroutine. Each turn: take what is queued, open a
// stream if there is work and none is open, send batches while the window
// allows, then wait for the next thing to happen.
func (ps *peerSender) run() {
	defer ps.r.wg.Done()
	var (
		st        *relayStream
		pending   []*item // taken from the queue, not yet sent, FIFO
		pause     = ps.r.cfg.RelayReconnectBackoff
		retryAt   time.Time
		lastBusy  = time.Now()
		queueCase chan *item
	)
	tick := time.NewTicker(ps.r.sweep)
	defer tick.Stop()
	defer func() { ps.shutdown(st, pending) }()
	for {
		pending = ps.drain(pending)
		if len(pending) > 0 && st == nil && !time.Now().Before(retryAt) {
			var err error
			if st, err = ps.open(); err != nil {
				ps.log.Debug("relay stream open failed", "err", err)
				if errors.Is(err, ErrPeerUnavailable) {
					pending = failAll(pending, err)
				}
				retryAt, pause = time.Now().Add(pause), min(2*pause, ps.r.cfg.RelayReconnectMaxBackoff)
			} else {
				pause = ps.r.cfg.RelayReconnectBackoff
			}
		}
		if st != nil {
			var err error
			if pending, err = ps.sendAll(st, pending); err != nil {
				ps.broken(st, err)
				st = nil
			}
		}
		if len(pending) > 0 || ps.inflightLen() > 0 {
			lastBusy = time.Now()
		}
		queueCase = ps.queue
		if len(pending) >= ps.r.cfg.RelayQueueSize {
			queueCase = nil // backpressure: callers block on the full queue
		}
		select {
		case <-ps.r.stop:
			return
		case it := <-queueCase:
			pending = append(pending, it)
		case <-ps.acked:
		case <-st.doneCh():
			ps.broken(st, st.err)
			st = nil
		case now := <-tick.C:
			pending = ps.expire(pending, st, now)
			if st != nil && ps.stalled(now) {
				ps.broken(st, errors.New("no ack within the delivery timeout"))
				st = nil
			}
			if len(pending) == 0 && ps.inflightLen() == 0 && now.Sub(lastBusy) > ps.r.cfg.RelayIdleTimeout && ps.r.release(ps) {
				return
			}
		}
	}
}

// doneCh is nil for no stream, so a select on it blocks.
func (st *relayStream) doneCh() <-chan struct{} {
	if st == nil {
		return nil
	}
	return st.done
}

// drain moves queued items into pending without blocking.
func (ps *peerSender) drain(pending []*item) []*item {
	for len(pending) < ps.r.cfg.RelayQueueSize {
		select {
		case it := <-ps.queue:
			pending = append(pending, it)
		default:
			return pending
		}
	}
	return pending
}

// open dials the peer and opens a stream, within Config.DialTimeout.
func (ps *peerSender) open() (*relayStream, error) {
	addr, ok := ps.r.resolver.GRPCAddr(ps.id)
	if !ok {
		return nil, fmt.Errorf("relay to %s: %w: not an alive member", ps.id, ErrPeerUnavailable)
	}
	cc, err := ps.r.pool.get(ps.id, addr)
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithTimeout(context.Background(), ps.r.cfg.DialTimeout)
	watched := make(chan struct{})
	go func() { // stop waiting for readiness when the relay closes
		defer close(watched)
		select {
		case <-ps.r.stop:
			dcancel()
		case <-dctx.Done():
		}
	}()
	defer func() { dcancel(); <-watched }()
	if !waitReady(dctx, cc, ps.r.cfg.DialTimeout) {
		return nil, fmt.Errorf("peer %s at %s not reachable", ps.id, addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := concordv1.NewClusterClient(cc).Relay(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open relay stream to %s: %w", ps.id, err)
	}
	st := &relayStream{stream: stream, cancel: cancel, done: make(chan struct{}), nextSeq: 1}
	ps.r.wg.Add(1)
	go ps.receive(st)
	ps.log.Debug("relay stream open", "addr", addr)
	return st, nil
}
