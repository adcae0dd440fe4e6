package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// PeerStreams sends MAP messages and message events to other nodes of the system.
// It implements router.Peers.
//
// Per peer it keeps a bounded queue, one sender goroutine and one
// long-lived Cluster.Relay stream: the goroutine drains up to
// Config.RelayMaxBatch envelopes into one RelayBatch, numbers them, and a
// second goroutine per stream reads the peer's RelayAcks and completes each
// envelope (nil, or a *DeliveryError from the ack). One FIFO queue and one
// stream per peer keep the order of messages to every recipient on that
// peer. A broken stream is re-opened with backoff; envelopes still queued
// are sent on the new stream, envelopes in flight fail (ErrDeliveryTimeout:
// MAP send is at-most-once, so they are not re-sent).
//
// All methods are safe for concurrent use. Close stops every goroutine.
type PeerStreams struct {
	cfg      Config
	log      *slog.Logger
	resolver AddrResolver
	peers    PeerLister
	pool     *pool
	sweep    time.Duration

	// mu guards senders and closed. Lock order: PeerStreams.mu, then
	// peerSender.mu (only the idle exit takes both).
	mu      sync.RWMutex
	senders map[string]*peerSender
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup

	droppedEvents atomic.Uint64
}

// NewPeerStreams returns a PeerStreams that finds peers through resolver (a
// *Directory) and broadcasts events to the peers listed by peers (the
// same *Directory; nil disables event broadcast).
func NewPeerStreams(cfg Config, resolver AddrResolver, peers PeerLister) (*PeerStreams, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if resolver == nil {
		return nil, fmt.Errorf("%w: PeerStreams needs an AddrResolver", ErrInvalidConfig)
	}
	return &PeerStreams{
		cfg: cfg, log: cfg.logger("cluster.relay"), resolver: resolver, peers: peers,
		pool:    newPool(cfg),
		sweep:   min(max(cfg.RelayDeliveryTimeout/10, 5*time.Millisecond), 100*time.Millisecond),
		senders: make(map[string]*peerSender),
		stop:    make(chan struct{}),
	}, nil
}

// Send queues env for the node nodeID and waits for the peer's ack: the
// waiting form of Submit (which implements router.Peers). It returns nil
// once the peer handed the message
// to the recipient's connection; a *DeliveryError (matching
// router.ErrNotConnected or rpc.ErrSlowConsumer) when the peer could not;
// ErrPeerUnavailable when the node is not alive or unreachable;
// ErrDeliveryTimeout when no ack came within Config.RelayDeliveryTimeout
// (or ctx's earlier deadline); ctx's error if ctx ends first; ErrClosed
// after Close. env.Message is not copied and must not change afterwards.
func (r *PeerStreams) Send(ctx context.Context, nodeID string, env *router.Envelope) error {
	it := r.messageItem(ctx, env)
	it.ch = make(chan error, 1)
	if err := r.enqueue(ctx, nodeID, it, true); err != nil {
		return err
	}
	select {
	case err := <-it.ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("relay to %s: %w: %w", nodeID, ErrDeliveryTimeout, ctx.Err())
	}
}

// Submit implements router.Peers: the non-waiting form of Send, for
// callers that complete a request later (a deferred map/send response) or
// send to many recipients at once. done is called exactly once with
// Send's result: on the caller's goroutine before Submit returns when
// the message is refused at once, otherwise on a relay goroutine. done must
// not block.
func (r *PeerStreams) Submit(ctx context.Context, nodeID string, env *router.Envelope, done func(error)) {
	it := r.messageItem(ctx, env)
	it.done = done
	if err := r.enqueue(ctx, nodeID, it, true); err != nil {
		done(err)
	}
}

// PublishEvent sends an ephemeral message event to every alive peer, for
// their local subscribers. It never blocks: a peer whose queue is full
// misses the event (counted in DroppedEvents).
func (r *PeerStreams) PublishEvent(ev registry.Event) { r.publishEvent(ev, nil) }

// publishEvent is PublishEvent to the alive peers for which want (nil:
// every one) is true.
func (r *PeerStreams) publishEvent(ev registry.Event, want func(nodeID string) bool) {
	if r.peers == nil {
		return
	}
	var wire *concordv1.RelayEvent
	var deadline time.Time
	for _, p := range r.peers.Peers() {
		if want != nil && !want(p) {
			continue
		}
		if wire == nil {
			wire, deadline = eventToWire(&ev), r.cfg.now().Add(r.cfg.RelayDeliveryTimeout)
		}
		it := &item{kind: concordv1.RelayKind_RELAY_KIND_EVENT, event: wire, deadline: deadline}
		if err := r.enqueue(context.Background(), p, it, false); err != nil {
			r.droppedEvents.Add(1)
		}
	}
}

// DroppedEvents is how many event copies were dropped because a peer's
// queue was full, the peer was unavailable or the relay closed.
func (r *PeerStreams) DroppedEvents() uint64 { return r.droppedEvents.Load() }

// Close fails everything queued or in flight with ErrClosed, stops every
// sender goroutine and stream, waits for them and closes the connections.
// It is idempotent.
func (r *PeerStreams) Close() error {
	r.mu.Lock()
	already := r.closed
	r.closed = true
	r.mu.Unlock()
	if !already {
		close(r.stop)
	}
	r.wg.Wait()
	return r.pool.close()
}

func (r *PeerStreams) messageItem(ctx context.Context, env *router.Envelope) *item {
	deadline := r.cfg.now().Add(r.cfg.RelayDeliveryTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return &item{
		kind: concordv1.RelayKind_RELAY_KIND_MESSAGE, msg: env.Message,
		agentID: env.RecipientAgentID, sessionID: env.RecipientSessionID, deadline: deadline,
	}
}

// enqueue puts it on nodeID's queue. With wait it blocks while the queue
// is full, until the item's deadline, ctx's end or Close; without, a full
// queue fails at once.
func (r *PeerStreams) enqueue(ctx context.Context, nodeID string, it *item, wait bool) error {
	if _, ok := r.resolver.GRPCAddr(nodeID); !ok {
		return fmt.Errorf("relay to %s: %w: not an alive member", nodeID, ErrPeerUnavailable)
	}
	ps, err := r.acquire(nodeID)
	if err != nil {
		return err
	}
	defer ps.enqueuers.Add(-1)
	select {
	case ps.queue <- it:
		return nil
	default:
	}
	if !wait {
		return fmt.Errorf("relay to %s: queue full", nodeID)
	}
	t := time.NewTimer(time.Until(it.deadline))
	defer t.Stop()
	select {
	case ps.queue <- it:
		return nil
	case <-t.C:
		return fmt.Errorf("relay to %s: %w: queue full until the deadline", nodeID, ErrPeerUnavailable)
	case <-ctx.Done():
		return fmt.Errorf("relay to %s: %w: %w", nodeID, ErrPeerUnavailable, ctx.Err())
	case <-r.stop:
		return ErrClosed
	}
}

// acquire returns nodeID's sender, starting one if needed, with its
// enqueuers count raised: a sender exits when idle only while nobody holds
// it this way, so an item is never put on the queue of a gone sender.
func (r *PeerStreams) acquire(nodeID string) (*peerSender, error) {
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return nil, ErrClosed
	}
	if ps := r.senders[nodeID]; ps != nil {
		ps.enqueuers.Add(1)
		r.mu.RUnlock()
		return ps, nil
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	ps := r.senders[nodeID]
	if ps == nil {
		ps = newPeerSender(r, nodeID)
		r.senders[nodeID] = ps
		r.wg.Add(1)
		go ps.run()
	}
	ps.enqueuers.Add(1)
	return ps, nil
}

// release removes an idle sender; false when it must keep running because
// something was queued or is being queued meanwhile.
func (r *PeerStreams) release(ps *peerSender) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ps.enqueuers.Load() > 0 || len(ps.queue) > 0 {
		return false
	}
	delete(r.senders, ps.id)
	return true
}

// EventBroadcaster is the router's EventSink on a node of a cluster: it
// publishes every message event to the local subscribers and relays it to
// the alive peers that could want it.
type EventBroadcaster struct {
	local LocalEvents
	relay *PeerStreams
	subs  SubscriberIndex
}

// LocalEvents is the local event sink (*fanout.Hub); router.EventSink has
// the same methods.
type LocalEvents interface {
	PublishEphemeral(ev registry.Event)
	HasSubscribers() bool
}

// SubscriberIndex tells which nodes hold subscriptions (*registry.State,
// from the replicated registry): a peer without any gets no copy of an
// ephemeral event.
type SubscriberIndex interface {
	HasSubscriptionsOn(nodeID string) bool
}

// NewEventBroadcaster combines the local sink with the relay. subs may be
// nil: then every alive peer gets every event.
func NewEventBroadcaster(local LocalEvents, relay *PeerStreams, subs SubscriberIndex) *EventBroadcaster {
	return &EventBroadcaster{local: local, relay: relay, subs: subs}
}

// PublishEphemeral publishes ev locally and relays it to the peers with
// subscribers. It never blocks.
func (b *EventBroadcaster) PublishEphemeral(ev registry.Event) {
	b.local.PublishEphemeral(ev)
	b.relay.publishEvent(ev, b.peerWants())
}

// HasSubscribers is true when local subscribers exist or an alive peer
// holds subscriptions, so the router skips building events nobody reads.
// A subscription added on a peer counts once this node has applied it.
func (b *EventBroadcaster) HasSubscribers() bool {
	if b.local.HasSubscribers() {
		return true
	}
	if b.relay.peers == nil {
		return false
	}
	for _, p := range b.relay.peers.Peers() {
		if b.subs == nil || b.subs.HasSubscriptionsOn(p) {
			return true
		}
	}
	return false
}

func (b *EventBroadcaster) peerWants() func(string) bool {
	if b.subs == nil {
		return nil
	}
	return b.subs.HasSubscriptionsOn
}
