package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// MethodMessage is the notification that carries a Message to its recipient.
const MethodMessage = "map/message"

// Router implements map/send. It holds no per-message state; all methods
// are safe for concurrent use.
type Router struct {
	nodeID string
	reg    registry.Reader
	conns  func(sessionID string) (notifier, bool)
	events EventSink
	peers  Peers
	fed    Federation
	perms  Permissions
	log    *slog.Logger
	now    func() time.Time

	// services maps service ids to their LocalService; copied on write by
	// RegisterService so that sends read it without a lock.
	services atomic.Pointer[map[string]LocalService]
}

// New validates cfg and returns a Router.
func New(cfg Config) (*Router, error) {
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
	return &Router{
		nodeID: cfg.NodeID,
		reg:    cfg.Registry,
		conns: func(id string) (notifier, bool) {
			c, ok := sessions.Conn(id)
			if !ok || c == nil {
				return nil, false
			}
			return c, true
		},
		events: cfg.Events,
		peers:  cfg.Peers,
		fed:    cfg.Federation,
		perms:  cfg.Permissions,
		log:    log.With("component", "router", "node_id", cfg.NodeID),
		now:    now,
	}, nil
}

// SendResult is map/send's result. Delivered lists the recipients (agent
// ids, or participant ids for participant addresses) whose connection or
// home node accepted the message; Failed the others with a reason.
type SendResult struct {
	MessageID string            `json:"messageId"`
	Delivered []string          `json:"delivered"`
	Failed    []FailedRecipient `json:"failed,omitempty"`
	// Queued lists remote recipients whose message waits in a federation
	// link's outage buffer (the link is down); it drains on reconnect.
	Queued []string `json:"queued,omitempty"`
}

// AppendJSON appends the JSON encoding of r, the same bytes encoding/json
// writes with HTML escaping off; node/rpc uses it to encode map/send's
// result without reflection.
func (r *SendResult) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"messageId":`...)
	b = jsonkit.AppendString(b, r.MessageID)
	b = append(b, `,"delivered":`...)
	if r.Delivered == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, id := range r.Delivered {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonkit.AppendString(b, id)
		}
		b = append(b, ']')
	}
	if len(r.Failed) > 0 {
		b = append(b, `,"failed":[`...)
		for i, f := range r.Failed {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = jsonkit.AppendString(b, f.ID)
			b = append(b, `,"reason":`...)
			b = jsonkit.AppendString(b, f.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(r.Queued) > 0 {
		b = append(b, `,"queued":[`...)
		for i, id := range r.Queued {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonkit.AppendString(b, id)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// FailedRecipient is one recipient the message did not reach.
type FailedRecipient struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Send handles map/send for the sender's session and returns once every
// recipient's outcome is known (for in-process callers such as spawn's
// initial message; a connection's requests go through HandleSend). It
// returns a *SendResult, or an *rpc.Error: -32602 for malformed params,
// 2000/2001/2002/2004/1003/5001 from address resolution, 2003 when no
// recipient could be reached; a send addressed to a registered service
// returns that service's answer instead. Call it in order per connection:
// that is what keeps per-recipient order.
func (r *Router) Send(ctx context.Context, from Sender, params json.RawMessage) (any, error) {
	p, res, svc, err := r.route(from, params)
	if err != nil {
		return nil, err
	}
	if svc != nil {
		return svc.HandleSend(ctx, from, params)
	}
	if res.fed != nil {
		return r.sendFederated(ctx, from, p, res.fed, false)
	}
	op := r.begin(ctx, from, p, res)
	op.release()
	op.wait()
	return op.result, op.err
}

// HandleSend is Send as a connection's request handler: when a recipient
// is on another node it defers the reply (rpc.Defer) until that node
// acknowledged delivery, so the connection serves its next request
// meanwhile — a pipelining sender is not held to one round trip per
// message. Sends reach Peers in arrival order either way.
func (r *Router) HandleSend(ctx context.Context, from Sender, params json.RawMessage) (any, error) {
	p, res, svc, err := r.route(from, params)
	if err != nil {
		return nil, err
	}
	if svc != nil {
		return svc.HandleSend(ctx, from, params)
	}
	if res.fed != nil {
		return r.sendFederated(ctx, from, p, res.fed, true)
	}
	op := r.begin(ctx, from, p, res)
	if op.remote {
		if d, ok := rpc.Defer(ctx); ok {
			op.then(func() { d.Reply(op.result, op.err) })
			op.release()
			return nil, nil
		}
	}
	op.release()
	op.wait()
	return op.result, op.err
}

// route decodes a send's params and resolves its address to one kind of
// recipient: a LocalService registered for the address's id (svc: the send
// is handed to it whole and its answer is the send's), or agents and
// sessions of this system's registry (res), or an agent or scope of another
// system (res.fed), handed whole to Federation.
func (r *Router) route(from Sender, params json.RawMessage) (p sendParams, res resolution, svc LocalService, err error) {
	if p, err = decodeSendParams(params); err != nil {
		return sendParams{}, resolution{}, nil, err
	}
	addr, err := parseAddress(p.to)
	if err != nil {
		return sendParams{}, resolution{}, nil, err
	}
	if svc = r.serviceAt(addr); svc != nil {
		return p, resolution{}, svc, nil
	}
	if res, err = r.resolve(from, addr); err != nil {
		return sendParams{}, resolution{}, nil, err
	}
	if err = r.permit(from, addr, &res); err != nil {
		return sendParams{}, resolution{}, nil, err
	}
	return p, res, nil, nil
}

// permit applies Config.Permissions: a recipient agent that the sender
// may not message, or that does not accept it, fails with reason
// permission_denied; a send addressed to agents by id whose every
// recipient is refused, or to a scope the sender may not message,
// answers 1003 instead.
func (r *Router) permit(from Sender, addr address, res *resolution) error {
	if r.perms == nil || res.system || res.fed != nil {
		return nil
	}
	free := !r.perms.SenderRestricted(from)
	if !free && res.scopeID != "" {
		if sc, ok := r.reg.Scope(res.scopeID); ok && !r.perms.MaySendToScope(from, &sc) {
			return rpc.NewError(rpc.CodePermissionDenied, "Not permitted to message scope "+res.scopeID).
				WithDetails(map[string]any{"scopeId": res.scopeID, "reason": "canMessage"})
		}
	}
	refused := 0
	for i := range res.recipients {
		rc := &res.recipients[i]
		if rc.agentID == "" || rc.reason != "" || (free && !r.recipientRestricted(rc)) {
			continue
		}
		if a, ok := r.reg.Agent(rc.agentID); ok && !r.perms.MayMessage(from, &a) {
			rc.reason = reasonNotPermitted
			refused++
		}
	}
	direct := addr.kind == addrAgent || addr.kind == addrAgents || (addr.kind == addrString && res.scopeID == "")
	if direct && refused > 0 && refused == len(res.recipients) {
		return rpc.NewError(rpc.CodePermissionDenied, "Not permitted to message the addressed agent").
			WithDetails(map[string]any{"reason": "canMessage/acceptsFrom"})
	}
	return nil
}

// begin delivers a resolved send to its local recipients and submits the
// remote ones to the relay. The returned operation completes once the
// caller has released it and every relay submission has answered.
func (r *Router) begin(ctx context.Context, from Sender, p sendParams, res resolution) *sendOp {
	now := r.now()
	op := &sendOp{r: r, from: from, p: p, res: res, ts: now.UnixMilli(), id: newMessageID(now)}
	if len(res.recipients) <= len(op.inline) {
		op.reasons = op.inline[:len(res.recipients)] // the common case: no allocation
	} else {
		op.reasons = make([]string, len(res.recipients))
	}
	op.pending.Store(1) // the caller's reference, dropped by release
	// The relay keeps msg until each peer acknowledged it, so a send with
	// remote recipients builds it in a buffer of its own (sized, not the
	// pool's 1 KiB); one without recycles a pooled buffer.
	op.remote = r.peers != nil && res.hasRemote(r.nodeID)
	var bp *[]byte
	var notif []byte
	if op.remote {
		notif = buildNotification(nil, op.id, from.from(), &p, op.ts)
	} else {
		bp = notifPool.Get().(*[]byte)
		notif = buildNotification((*bp)[:0], op.id, from.from(), &p, op.ts)
	}
	msg := notif[len(`{"message":`) : len(notif)-1]
	for i, rc := range res.recipients {
		switch {
		case rc.reason != "":
			op.reasons[i] = rc.reason
		case rc.homeNode == r.nodeID:
			op.reasons[i] = r.notify(rc.sessionID, notif)
		case r.peers == nil:
			op.reasons[i] = reasonNoRelay
		default:
			op.pending.Add(1)
			env := &Envelope{Message: msg, RecipientAgentID: rc.agentID, RecipientSessionID: rc.sessionID}
			r.peers.Submit(ctx, rc.homeNode, env, func(err error) {
				if err != nil {
					r.log.Debug("relay failed", "peer", rc.homeNode, "err", err)
				}
				op.reasons[i] = relayFailureReason(err)
				op.release()
			})
		}
	}
	if bp != nil {
		putNotif(bp, notif)
	}
	return op
}

// relayFailureReason maps a relay outcome to a map/send failure reason
// ("" for delivered): the peer's own verdict when it gave one.
func relayFailureReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotConnected):
		return reasonNotConnected
	case errors.Is(err, rpc.ErrSlowConsumer):
		return reasonSlowConsumer
	default:
		return reasonRelayFailed
	}
}

// sendOp is one map/send in progress: its recipients' outcomes are filled
// in by the caller (local ones) and by relay callbacks (remote ones); the
// last of them to finish builds the result and publishes the events.
type sendOp struct {
	r       *Router
	from    Sender
	p       sendParams
	res     resolution
	ts      int64
	id      string
	reasons []string  // per recipient: "" delivered, else why not
	inline  [1]string // reasons' storage for a single recipient
	remote  bool      // some recipient is submitted to the relay
	out     SendResult
	outOne  [1]string // out.Delivered's storage for a single recipient

	pending atomic.Int32 // unfinished submissions + the caller's reference
	mu      sync.Mutex
	next    func() // run once finished (then, wait)
	over    bool   // result and err are set

	result any
	err    error
}

// release drops one reference; the last one finishes the operation.
// Each index of reasons is written before its release, and atomic
// operations order those writes before finish reads them.
func (op *sendOp) release() {
	if op.pending.Add(-1) == 0 {
		op.finish()
	}
}

// then runs fn once the operation has finished (at once if it has).
func (op *sendOp) then(fn func()) {
	op.mu.Lock()
	if !op.over {
		op.next = fn
		op.mu.Unlock()
		return
	}
	op.mu.Unlock()
	fn()
}

// wait returns once the operation has finished.
func (op *sendOp) wait() {
	op.mu.Lock()
	if op.over {
		op.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	op.next = func() { close(ch) }
	op.mu.Unlock()
	<-ch
}

func (op *sendOp) finish() {
	// The result lives in op (one allocation for the whole send).
	out := &op.out
	out.MessageID, out.Delivered = op.id, op.outOne[:0]
	if len(op.reasons) > len(op.outOne) {
		out.Delivered = make([]string, 0, len(op.reasons))
	}
	for i, rc := range op.res.recipients {
		if reason := op.reasons[i]; reason != "" {
			out.Failed = append(out.Failed, FailedRecipient{ID: rc.label(), Reason: reason})
		} else {
			out.Delivered = append(out.Delivered, rc.label())
		}
	}
	if r := op.r; r.events != nil && r.events.HasSubscribers() {
		r.publish(op.from, &op.p, op.res, out, op.ts)
	}
	if len(out.Delivered) == 0 && len(out.Failed) > 0 {
		op.err = rpc.NewError(rpc.CodeDeliveryFailed, "Delivery failed for every recipient").
			WithDetails(map[string]any{"messageId": op.id, "failed": out.Failed})
	} else {
		op.result = out
	}
	op.mu.Lock()
	op.over = true
	fn := op.next
	op.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// newMessageID is a message id (a ULID) for a message sent at now: the
// same clock reading as its meta.timestamp, and the same monotonic entropy
// ulid.Make uses.
func newMessageID(now time.Time) string {
	return ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
}

// notify enqueues the map/message notification on a local session's
// connection; it never blocks.
func (r *Router) notify(sessionID string, notif []byte) string {
	c, ok := r.conns(sessionID)
	if !ok {
		return reasonNotConnected
	}
	switch err := c.NotifyRaw(MethodMessage, notif); {
	case err == nil:
		return ""
	case errors.Is(err, rpc.ErrSlowConsumer):
		return reasonSlowConsumer
	default:
		return reasonNotConnected
	}
}

// DeliverLocal delivers a message relayed from another node to a recipient
// attached to this node. The agent's current session (from the registry)
// wins over the envelope's session id, which may be stale if the agent
// reconnected. It returns ErrNotConnected when the recipient has no live
// connection here, or rpc.ErrSlowConsumer / rpc.ErrClosed from the connection.
func (r *Router) DeliverLocal(_ context.Context, env *Envelope) error {
	if env == nil || len(env.Message) == 0 || (env.RecipientAgentID == "" && env.RecipientSessionID == "") {
		return ErrBadEnvelope
	}
	sessionID := env.RecipientSessionID
	if env.RecipientAgentID != "" {
		if a, ok := r.reg.Agent(env.RecipientAgentID); ok && a.SessionID != "" {
			sessionID = a.SessionID
		}
	}
	c, ok := r.conns(sessionID)
	if !ok {
		return ErrNotConnected
	}
	// NotifyRaw copies the params into the connection's frame, so the
	// buffer goes back to the pool at once.
	bp := notifPool.Get().(*[]byte)
	notif := append((*bp)[:0], `{"message":`...)
	notif = append(notif, env.Message...)
	notif = append(notif, '}')
	err := c.NotifyRaw(MethodMessage, notif)
	putNotif(bp, notif)
	if err != nil {
		return fmt.Errorf("deliver to session %s: %w", sessionID, err)
	}
	return nil
}

// notifPool recycles notification buffers: a local recipient's connection
// copies the params into its own frame (NotifyRaw), so the buffer is free
// again once Send has delivered, unless the relay got it.
var notifPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledNotif keeps one huge message from pinning memory in the pool.
const maxPooledNotif = 64 << 10

// putNotif returns a pooled buffer, now holding notif (possibly grown),
// unless it grew too large to keep.
func putNotif(bp *[]byte, notif []byte) {
	if cap(notif) <= maxPooledNotif {
		*bp = notif[:0]
		notifPool.Put(bp)
	}
}

// buildNotification appends {"message":{id, from, to, payload?, meta}}
// from the raw params to b; payload and `to` are copied verbatim.
func buildNotification(b []byte, id, from string, p *sendParams, ts int64) []byte {
	b = slices.Grow(b, 128+len(from)+len(p.to)+len(p.payload)+len(p.meta))
	b = append(b, `{"message":{"id":`...)
	b = jsonkit.AppendString(b, id)
	b = append(b, `,"from":`...)
	b = jsonkit.AppendString(b, from)
	b = append(b, `,"to":`...)
	b = append(b, p.to...)
	if p.payload != nil {
		b = append(b, `,"payload":`...)
		b = append(b, p.payload...)
	}
	b = append(b, `,"meta":`...)
	setFrom := ""
	if p.info.hasFrom {
		setFrom = from
	}
	b = appendMeta(b, p.meta, p.info.hasTimestamp, ts, setFrom)
	return append(b, "}}"...)
}
