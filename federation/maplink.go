package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// MAPConn is one MAP (JSON-RPC over WebSocket) connection to a foreign
// server, as a map link uses it. Call returns a *CodeError when the
// server answered with an error, any other error when the connection
// failed. Done is closed when the connection has ended; Close ends it.
type MAPConn interface {
	Call(ctx context.Context, method string, params any) (json.RawMessage, error)
	Done() <-chan struct{}
	Close()
}

// MAPDialer opens a connection to a map link's foreign server (its URL,
// CA). onNotify receives the server's notifications (map/message,
// map/event) on the connection's reader goroutine: it must return quickly
// and must not call the connection. node provides it on top of node/rpc.
type MAPDialer func(ctx context.Context, link *concordv1.FedMapLink, onNotify func(method string, params json.RawMessage)) (MAPConn, error)

// mapLink is this node's side of one link of kind map. On the holder (the
// node the leader chose) it runs the link: a watcher session that imports
// the foreign directory and one proxy session per exported (or sending)
// local agent, which relay messages both ways. On every other node it
// forwards messages for the foreign system to the holder, holding them
// in the link's bounded buffer while no holder is reachable.
type mapLink struct {
	m    *Manager
	peer string
	log  *slog.Logger

	mu      sync.Mutex
	link    *concordv1.FedLink
	buf     buffer // non-holder: messages waiting for the holder
	wake    chan struct{}
	role    context.CancelFunc // ends the current role (holder or forwarder)
	roleKey string             // holder/epoch/url the role runs for
	stopped bool
	stopErr *CodeError
	stopCh  chan struct{}
	hold    *holding // set while this node holds the link

	// stats
	sent, reconnects, inErrors uint64
}

func newMapLink(m *Manager, l *concordv1.FedLink) *mapLink {
	return &mapLink{
		m: m, peer: l.GetPeerSystemId(), link: l, log: m.log.With("peer", l.GetPeerSystemId(), "link_kind", "map"),
		wake: make(chan struct{}, 1), stopCh: make(chan struct{}),
	}
}

func (l *mapLink) policy() *concordv1.FedLink {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.link
}

// bufferPolicy is the link's buffer policy. Caller holds l.mu.
func (l *mapLink) bufferPolicy() *concordv1.FedBufferPolicy { return bufferPolicyOf(l.link) }

func bufferPolicyOf(link *concordv1.FedLink) *concordv1.FedBufferPolicy {
	if p := link.GetBuffer(); p.GetOverflow() != concordv1.FedOverflow_FED_OVERFLOW_UNSPECIFIED {
		return p
	}
	return DefaultBufferPolicy()
}

// roleKeyOf names what the current role depends on: a change of holder,
// epoch, URL or credentials restarts it.
func roleKeyOf(l *concordv1.FedLink) string {
	mp := l.GetMap()
	b, _ := json.Marshal([]any{mp.GetHolderNodeId(), mp.GetHolderEpoch(), mp.GetUrl(), mp.GetAuth().GetMethod(), mp.GetAuth().GetToken(), mp.GetCaPem()})
	return string(b)
}

func (l *mapLink) update(link *concordv1.FedLink) {
	l.mu.Lock()
	l.link = link
	restart := l.role != nil && l.roleKey != roleKeyOf(link)
	if restart {
		l.role()
	}
	l.mu.Unlock()
	l.signal()
}

func (l *mapLink) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run alternates between the holder and forwarder roles as the link's
// holder changes, until ctx ends or the link is stopped.
func (l *mapLink) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		rctx, rcancel := context.WithCancel(ctx)
		l.mu.Lock()
		link := l.link
		l.role, l.roleKey = rcancel, roleKeyOf(link)
		l.mu.Unlock()
		switch holder := link.GetMap().GetHolderNodeId(); {
		case holder == l.m.cfg.NodeID:
			l.runHolder(rctx, link)
		default:
			l.runForwarder(rctx)
		}
		rcancel()
	}
}

// enqueue hands env to the holder's proxy of its sender (on the holder) or
// to the forwarding buffer (elsewhere). done hears the outcome once.
func (l *mapLink) enqueue(env *concordv1.FedEnvelope, done func(Outcome)) {
	l.mu.Lock()
	if l.stopped {
		err := l.stopErr
		l.mu.Unlock()
		done(Outcome{Err: err})
		return
	}
	if h := l.hold; h != nil {
		l.mu.Unlock()
		h.enqueue(env, done)
		return
	}
	it := &item{env: env, size: envSize(env), at: l.m.now(), done: done}
	dropped, refuse := l.buf.push(it, l.bufferPolicy(), it.at)
	l.mu.Unlock()
	tellDropped(dropped)
	if refuse != nil {
		done(Outcome{Err: refuse})
		return
	}
	l.signal()
}

// stop ends the link for good: waiting senders hear err.
func (l *mapLink) stop(err *CodeError) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped, l.stopErr = true, err
	items := l.buf.takeAll()
	l.mu.Unlock()
	close(l.stopCh)
	tell(items, Outcome{Err: err})
}

// runForwarder sends buffered messages to the holder node in batches
// (MapForward) until ctx ends. A message waits (queued) while the link
// has no holder or the holder is unreachable; a batch whose call fails
// after it was sent answers 5000 (its outcome is unknown), as a Concord
// link does.
func (l *mapLink) runForwarder(ctx context.Context) {
	tick := time.NewTicker(l.m.cfg.Ping)
	defer tick.Stop()
	attempt := 0
	for {
		holder := l.policy().GetMap().GetHolderNodeId()
		sent, err := l.forwardBatch(ctx, holder)
		switch {
		case err != nil:
			l.log.Debug("forward to map link holder", "holder", holder, "err", err)
			attempt++
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(attempt, l.m.cfg.BackoffMin, l.m.cfg.BackoffMax)):
			}
			continue
		case sent:
			attempt = 0
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-tick.C:
		}
	}
}

// forwardBatch forwards up to maxBatch buffered messages to holder. sent
// reports that a batch went out.
func (l *mapLink) forwardBatch(ctx context.Context, holder string) (sent bool, err error) {
	l.mu.Lock()
	expired := l.buf.expire(l.bufferPolicy(), l.m.now())
	n := len(l.buf.items)
	l.mu.Unlock()
	tellDropped(expired)
	if n == 0 || holder == "" || l.m.deps.NodeConn == nil {
		l.tellQueued()
		return false, nil
	}
	if nodes := l.m.deps.Nodes; nodes != nil && !slices.Contains(nodes(), holder) {
		// Gossip says the holder is gone: wait (queued) for the leader to
		// choose another rather than fail messages on a dead node.
		l.tellQueued()
		return false, fmt.Errorf("holder %s is not a live node", holder)
	}
	cc, err := l.m.deps.NodeConn(holder)
	if err != nil {
		l.tellQueued()
		return false, err
	}
	l.mu.Lock()
	var batch []*item
	req := &concordv1.MapForwardRequest{PeerSystemId: l.peer}
	bytes := 0
	for len(l.buf.items) > 0 && len(batch) < maxBatch && (len(batch) == 0 || bytes+l.buf.items[0].size <= maxBatchBytes) {
		it := l.buf.popFront()
		bytes += it.size
		it.env.Seq = uint64(len(batch) + 1)
		batch = append(batch, it)
		req.Envelopes = append(req.Envelopes, it.env)
	}
	l.sent += uint64(len(batch))
	l.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, l.m.cfg.AckTimeout+l.m.cfg.CallTimeout)
	defer cancel()
	res, err := concordv1.NewFederationClient(cc).MapForward(cctx, req)
	if err != nil {
		tell(batch, Outcome{Err: codeErr(CodeUnavailable, "Federation link to "+l.peer+": its holder node "+holder+
			" did not answer; the message may or may not have been delivered", map[string]any{"retryable": true, "systemId": l.peer})})
		return true, err
	}
	acks := map[uint64]*concordv1.FedAck{}
	for _, a := range res.GetAcks() {
		acks[a.GetSeq()] = a
	}
	for i, it := range batch {
		if it.done != nil {
			it.done(forwardOutcome(acks[uint64(i+1)], l.peer))
		}
	}
	return true, nil
}

// tellQueued tells the senders still waiting that their message is queued.
func (l *mapLink) tellQueued() {
	l.mu.Lock()
	waiting := detachWaiting(l.buf.items)
	l.mu.Unlock()
	tellQueued(waiting)
}

func forwardOutcome(a *concordv1.FedAck, peer string) Outcome {
	switch {
	case a == nil:
		return Outcome{Err: codeErr(CodeUnavailable, "Federation link to "+peer+": the holder node did not acknowledge", map[string]any{"retryable": true})}
	case a.GetCode() != 0:
		return Outcome{Err: codeErr(int(a.GetCode()), a.GetMessage(), map[string]any{"systemId": peer})}
	case a.GetQueued():
		return Outcome{Queued: true}
	}
	return Outcome{Delivered: a.GetDelivered()}
}

// acceptForward serves MapForward on the holder: every envelope goes to
// its sender's proxy; the answer waits for every outcome (bounded).
func (l *mapLink) acceptForward(ctx context.Context, envs []*concordv1.FedEnvelope) ([]*concordv1.FedAck, error) {
	l.mu.Lock()
	h := l.hold
	l.mu.Unlock()
	if h == nil {
		return nil, errNotHolder
	}
	acks := make([]*concordv1.FedAck, len(envs))
	// The last outcome closes waited: no goroutine is left waiting for
	// outcomes (a requeued envelope's may come much later) once this
	// returns on ctx. pending starts at one, the loop's own hold.
	var mu sync.Mutex
	pending := 1
	waited := make(chan struct{})
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		if pending--; pending == 0 {
			close(waited)
		}
	}
	for i, env := range envs {
		seq := env.GetSeq()
		if cerr := checkForwarded(env, l.m.cfg.SystemID, l.peer, l.m.cfg.MaxEnvelopeBytes); cerr != nil {
			acks[i] = &concordv1.FedAck{Seq: seq, Code: int32(cerr.Code), Message: cerr.Message}
			continue
		}
		mu.Lock()
		pending++
		mu.Unlock()
		h.enqueue(env, func(o Outcome) {
			a := &concordv1.FedAck{Seq: seq, Delivered: o.Delivered, Queued: o.Queued}
			if o.Err != nil {
				a.Code, a.Message = int32(o.Err.Code), o.Err.Message
			}
			mu.Lock()
			acks[i] = a
			mu.Unlock()
			release()
		})
	}
	release()
	select {
	case <-waited:
		mu.Lock()
		defer mu.Unlock()
		return acks, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// errNotHolder: MapForward reached a node that does not hold the link.
var errNotHolder = errors.New("federation: this node does not hold the map link")

// checkForwarded validates an envelope another node of this system
// forwarded for the map link to peer.
func checkForwarded(env *concordv1.FedEnvelope, self, peer string, maxBytes int) *CodeError {
	switch {
	case env.GetSourceSystem() != self || env.GetTargetSystem() != peer:
		return codeErr(CodeInvalidParams, "forwarded envelope names the wrong systems", nil)
	case env.GetToAgent() == "" || env.GetFrom() == "" || env.GetMessageId() == "":
		return codeErr(CodeInvalidParams, "forwarded envelope needs a sender, a message id and a recipient agent", nil)
	case len(env.GetPayload())+len(env.GetMeta()) > maxBytes:
		return codeErr(CodeInvalidParams, "forwarded envelope too large", nil)
	}
	return nil
}

// fill copies the link's live figures into st.
func (l *mapLink) fill(st *concordv1.FedLinkStatus) {
	l.mu.Lock()
	h := l.hold
	st.QueueDepth, st.QueueBytes = uint32(len(l.buf.items)), uint64(l.buf.bytes)
	st.Sent, st.Dropped, st.InboundErrors = l.sent, l.buf.dropped, l.inErrors
	st.Reconnects = l.reconnects
	l.mu.Unlock()
	st.HolderNodeId = l.policy().GetMap().GetHolderNodeId()
	st.ConnectedTo = RedactURL(l.policy().GetMap().GetUrl())
	switch {
	case h != nil:
		h.fill(st)
	case st.HolderNodeId != "":
		st.State = "forwarding"
	default:
		st.State = "no-holder"
	}
}

func (l *mapLink) countInError() {
	l.mu.Lock()
	l.inErrors++
	l.mu.Unlock()
}

func (l *mapLink) countReconnect() {
	l.mu.Lock()
	l.reconnects++
	l.mu.Unlock()
}

// NodeConnFunc returns a client connection to another node of this
// system (the node's cluster connection pool).
type NodeConnFunc func(nodeID string) (grpc.ClientConnInterface, error)
