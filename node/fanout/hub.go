package fanout

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concordmap/concord/node/registry"
)

// Notification methods the hub sends.
const (
	MethodEvent    = "map/event"
	MethodOverflow = "map/subscription.overflow"
)

// Hub delivers events to the subscriptions of the sessions attached to
// this node. Its methods are safe for concurrent use; Run must be running
// for registry events (and retries) to flow.
type Hub struct {
	cfg   Config
	reg   registry.Reader
	prop  Proposer
	conns func(sessionID string) (notifier, bool)
	log   *slog.Logger
	now   func() time.Time

	count atomic.Int64  // local subscriptions, for HasSubscribers
	wake  chan struct{} // cap 1: poke Run
	flush chan struct{} // cap 1: poke the cursor loop

	// mu guards everything below and every *sub. Delivery (NotifyRaw) runs
	// under it: NotifyRaw never blocks, and holding mu keeps sequence
	// numbers in send order.
	mu        sync.Mutex
	subs      map[string]*sub            // by subscription id
	bySession map[string]map[string]*sub // session id -> subscription id -> sub
	cache     eventCache
	buf       []byte // notification scratch buffer (NotifyRaw copies)
	notices   []notice
	removals  []removal
	pending   map[string]pendingCursor // cursors of detached subscriptions awaiting a flush
	detached  map[string]detachedSub   // last local state of detached subscriptions
}

// notice is a final overflow notification still to be sent.
type notice struct {
	sessionID string
	params    []byte
}

// removal is a subscription closed by the hub, to be removed in the registry.
type removal struct {
	sessionID, subID string
	epoch            uint64 // sub.epoch
}

type pendingCursor struct {
	sessionID, eventID string
	seq, epoch         uint64 // epoch: sub.epoch
}

// detachedSub remembers where a detached subscription stood, so that a
// quick reattach on this node keeps numbering even if the cursor flush has
// not been applied yet.
type detachedSub struct {
	seq uint64
	at  time.Time
}

// New validates cfg and returns a Hub. Start Run to deliver.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	sessions := cfg.Sessions
	return &Hub{
		cfg:  cfg,
		reg:  cfg.Registry,
		prop: cfg.Proposer,
		conns: func(id string) (notifier, bool) {
			c, ok := sessions.Conn(id)
			if !ok || c == nil {
				return nil, false
			}
			return c, true
		},
		log:       log.With("component", "fanout", "node_id", cfg.NodeID),
		now:       now,
		wake:      make(chan struct{}, 1),
		flush:     make(chan struct{}, 1),
		subs:      map[string]*sub{},
		bySession: map[string]map[string]*sub{},
		pending:   map[string]pendingCursor{},
		detached:  map[string]detachedSub{},
		cache:     eventCache{limit: max(cfg.QueueLimit, 1024)},
	}, nil
}

// HasSubscribers reports whether any subscription is delivering on this
// node (the router skips building message events otherwise).
func (h *Hub) HasSubscribers() bool { return h.count.Load() > 0 }

// PublishEphemeral delivers a message event to the matching local
// subscriptions, live only: it is not in the replicated log, so it is not
// replayable and a subscription that cannot take it now queues it (up to
// QueueLimit) or drops it. It never blocks on a connection.
func (h *Hub) PublishEphemeral(ev registry.Event) {
	if h.count.Load() == 0 {
		return
	}
	p := prepare(ev, true)
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if h.wants(s, p) {
			h.offer(s, p, now)
		}
	}
}

// poke wakes Run without blocking.
func (h *Hub) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// addLocked registers s for delivery, held back until armActivation
// releases it (or ActivationDelay has passed).
func (h *Hub) addLocked(s *sub) {
	h.subs[s.id] = s
	m := h.bySession[s.sessionID]
	if m == nil {
		m = map[string]*sub{}
		h.bySession[s.sessionID] = m
	}
	m[s.id] = s
	h.count.Add(1)
	if h.cfg.AfterReply != nil {
		s.afterReply = true
	} else {
		s.activeAt = h.now().Add(h.cfg.ActivationDelay)
	}
}

// armActivation asks Config.AfterReply to release subs once the reply to
// the current request is queued; if it cannot, they wait ActivationDelay.
// Called without h.mu: AfterReply may run fn at once.
func (h *Hub) armActivation(ctx context.Context, subs []*sub) {
	if h.cfg.AfterReply == nil || len(subs) == 0 {
		return
	}
	release := func() {
		h.mu.Lock()
		for _, s := range subs {
			s.afterReply = false
		}
		h.mu.Unlock()
		h.poke()
	}
	if h.cfg.AfterReply(ctx, release) {
		return
	}
	h.mu.Lock()
	for _, s := range subs {
		s.afterReply = false
		s.activeAt = h.now().Add(h.cfg.ActivationDelay)
	}
	h.mu.Unlock()
}

// removeLocked stops local delivery of s.
func (h *Hub) removeLocked(s *sub) {
	if _, ok := h.subs[s.id]; !ok {
		return
	}
	delete(h.subs, s.id)
	if m := h.bySession[s.sessionID]; m != nil {
		delete(m, s.id)
		if len(m) == 0 {
			delete(h.bySession, s.sessionID)
		}
	}
	h.count.Add(-1)
}
