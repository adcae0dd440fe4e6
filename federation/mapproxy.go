package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// proxy is one local agent's session on the foreign server: registered
// there as an agent, it sends what the local agent addresses to foreign
// agents (so the foreign server stamps it as the sender) and receives
// what foreign agents send it, which it delivers to the local agent.
// Its goroutine owns the connection; push and the reader's notifications
// run on other goroutines, under mu.
type proxy struct {
	h        *holding
	localID  string
	agent    *concordv1.FedRemoteAgent
	exported bool // guarded by h.mu
	cancel   context.CancelFunc
	wake     chan struct{}

	mu          sync.Mutex
	queue       buffer
	up          bool
	foreignID   string
	sessionID   string
	resumeToken string
	pending     map[string][]pairing // open requests by foreign target id
	idTaken     int                  // registrations refused with 3000 in a row
	pairSeq     uint64               // numbers open requests
	closed      bool                 // the role ended: push refuses
}

// codeAgentExists is MAP's AGENT_EXISTS; after maxIDTaken of them in a
// row a proxy registers without asking for its local id.
const (
	codeAgentExists = 3000
	maxIDTaken      = 5
)

func (p *proxy) isUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

func (p *proxy) foreign() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.foreignID
}

// close marks the proxy closed (its role ended) and returns what it
// still held; later pushes are refused.
func (p *proxy) close() []*item {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return p.queue.takeAll()
}

// push queues it; while the session is down its sender hears "queued".
// It returns false, taking nothing, once the proxy is closed.
func (p *proxy) push(it *item) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	up := p.up
	done := it.done
	if !up {
		it.done = nil
	}
	dropped, refuse := p.queue.push(it, bufferPolicyOf(p.h.link), it.at)
	p.mu.Unlock()
	tellDropped(dropped)
	switch {
	case refuse != nil:
		if done != nil {
			done(Outcome{Err: refuse})
		}
	case !up:
		if done != nil {
			done(Outcome{Queued: true})
		}
	default:
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// run keeps the session up, reconnecting with jittered backoff, until ctx
// ends.
func (p *proxy) run(ctx context.Context) {
	l := p.h.l
	for attempt := 0; ctx.Err() == nil; attempt++ {
		wasUp, err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if wasUp {
			attempt = 0
		}
		l.log.Debug("map proxy session ended", "agent", p.localID, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(attempt, l.m.cfg.BackoffMin, l.m.cfg.BackoffMax)):
		}
	}
}

// session connects (resuming the previous session when the server allows
// it), registers the proxy agent unless the resumed session still owns
// it, then sends queued messages until the connection ends.
func (p *proxy) session(ctx context.Context) (wasUp bool, err error) {
	l := p.h.l
	cctx, cancel := context.WithTimeout(ctx, l.m.cfg.CallTimeout)
	defer cancel()
	conn, err := l.m.deps.MAPDial(cctx, p.h.link.GetMap(), p.onNotify)
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	p.mu.Lock()
	sid, tok, fid := p.sessionID, p.resumeToken, p.foreignID
	p.mu.Unlock()
	raw, err := conn.Call(cctx, "map/connect", connectParams(p.h.link.GetMap(), "agent", p.displayName(), sid, tok))
	if err != nil {
		return false, fmt.Errorf("map/connect: %w", err)
	}
	res, err := parseConnect(raw)
	if err != nil {
		return false, err
	}
	if !res.Reconnected || fid == "" || !slices.Contains(res.OwnedAgents, fid) {
		if fid, err = p.register(cctx, conn); err != nil {
			return false, err
		}
	}
	p.mu.Lock()
	p.up, p.foreignID, p.sessionID, p.resumeToken = true, fid, res.SessionID, res.ResumeToken
	p.mu.Unlock()
	l.countReconnect()
	defer p.down()
	return true, p.sendLoop(ctx, conn)
}

func (p *proxy) displayName() string {
	if n := p.agent.GetName(); n != "" {
		return n
	}
	return p.localID
}

// register registers the proxy agent, asking for the local agent's id (a
// server that assigns its own ids answers with another); a server that
// already has that id gets a registration without one.
func (p *proxy) register(ctx context.Context, conn MAPConn) (string, error) {
	md := proxyMeta{ConcordSystem: p.h.l.m.cfg.SystemID, ConcordAgent: p.localID, ConcordProxy: true, ConcordHolder: p.h.marker}
	params := map[string]any{"agentId": p.localID, "name": p.displayName(), "metadata": md}
	if r := p.agent.GetRole(); r != "" {
		params["role"] = r
	}
	p.mu.Lock()
	taken := p.idTaken
	p.mu.Unlock()
	if taken >= maxIDTaken {
		delete(params, "agentId") // someone else keeps that id: let the server choose
	}
	raw, err := conn.Call(ctx, "map/agents/register", params)
	var ce *CodeError
	if errors.As(err, &ce) && ce.Code == codeAgentExists {
		// Usually the previous holder's proxy, which the server frees
		// once it sees that connection lost: try again later.
		p.mu.Lock()
		p.idTaken++
		p.mu.Unlock()
	}
	if err != nil {
		return "", fmt.Errorf("map/agents/register: %w", err)
	}
	var res registerResult
	if json.Unmarshal(raw, &res) != nil || ValidForeignAgent(&concordv1.FedRemoteAgent{Id: res.Agent.ID}) != nil {
		return "", fmt.Errorf("%w: map/agents/register result", errForeign)
	}
	p.mu.Lock()
	p.idTaken = 0
	p.mu.Unlock()
	return res.Agent.ID, nil
}

// down marks the session lost: senders still waiting hear "queued".
func (p *proxy) down() {
	p.mu.Lock()
	p.up = false
	waiting := detachWaiting(p.queue.items)
	p.mu.Unlock()
	tellQueued(waiting)
}

// sendLoop sends queued messages in order, one map/send at a time (the
// order per sender and recipient is kept), until the connection ends.
func (p *proxy) sendLoop(ctx context.Context, conn MAPConn) error {
	l := p.h.l
	for {
		p.mu.Lock()
		expired := p.queue.expire(bufferPolicyOf(p.h.link), l.m.now())
		var it *item
		if len(p.queue.items) > 0 {
			it = p.queue.popFront()
		}
		p.mu.Unlock()
		tellDropped(expired)
		if it == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-conn.Done():
				return errors.New("connection closed")
			case <-p.wake:
			}
			continue
		}
		if err := p.send(ctx, conn, it); err != nil {
			return err
		}
	}
}

// send relays one message; a connection failure ends the session (the
// sender hears 5000: the server may or may not have taken it).
func (p *proxy) send(ctx context.Context, conn MAPConn, it *item) error {
	l := p.h.l
	env := it.env
	params := map[string]any{"to": map[string]string{"agent": env.GetToAgent()}}
	if len(env.GetPayload()) > 0 {
		params["payload"] = json.RawMessage(env.GetPayload())
	}
	if len(env.GetMeta()) > 0 {
		params["meta"] = json.RawMessage(env.GetMeta())
	}
	// A request's pairing is open before the send: the answer can come
	// back before the server answers map/send.
	target, seq := env.GetToAgent(), uint64(0)
	if cid := requestCorrelation(env.GetMeta()); cid != "" {
		seq = p.openPairing(target, cid)
	}
	cctx, cancel := context.WithTimeout(ctx, l.m.cfg.AckTimeout)
	defer cancel()
	raw, err := conn.Call(cctx, "map/send", params)
	l.mu.Lock()
	l.sent++
	l.mu.Unlock()
	var res struct {
		MessageID string    `json:"messageId"`
		Delivered *[]string `json:"delivered"`
	}
	if err == nil {
		_ = json.Unmarshal(raw, &res)
	}
	if seq != 0 {
		p.settlePairing(target, seq, res.MessageID, err == nil)
	}
	var ce *CodeError
	switch {
	case errors.As(err, &ce):
		done(it, Outcome{Err: codeErr(ce.Code, "Foreign MAP system "+l.peer+" refused the message: "+ce.Message, map[string]any{"systemId": l.peer})})
		return nil
	case err != nil:
		done(it, Outcome{Err: codeErr(CodeUnavailable, "Federation link to "+l.peer+" lost before the foreign server answered; the message may or may not have been delivered",
			map[string]any{"retryable": true, "systemId": l.peer})})
		return err
	}
	if res.Delivered != nil && len(*res.Delivered) == 0 {
		done(it, Outcome{Queued: true}) // the foreign server holds it for an offline agent
		return nil
	}
	done(it, Outcome{Delivered: []string{RemoteID(l.peer, target)}})
	return nil
}

// openPairing opens a request to target awaiting an answer correlated
// cid (bounded: the oldest go first) and returns its number.
func (p *proxy) openPairing(target, cid string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[target] == nil && len(p.pending) >= maxPairings {
		return 0
	}
	p.pairSeq++
	open := append(p.pending[target], pairing{seq: p.pairSeq, correlationID: cid, at: p.h.l.m.now()})
	if len(open) > maxPairings {
		open = open[len(open)-maxPairings:]
	}
	p.pending[target] = open
	return p.pairSeq
}

// settlePairing records the foreign message id of request seq, or drops
// it when the send failed (no answer will come).
func (p *proxy) settlePairing(target string, seq uint64, foreignMsgID string, sent bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := p.pending[target]
	for i := range open {
		if open[i].seq != seq {
			continue
		}
		if sent {
			open[i].foreignMsgID = foreignMsgID
		} else {
			open = append(open[:i:i], open[i+1:]...)
		}
		break
	}
	if len(open) == 0 {
		delete(p.pending, target)
	} else {
		p.pending[target] = open
	}
}

func done(it *item, o Outcome) {
	if it.done != nil {
		it.done(o)
	}
}

// onNotify runs on the connection's reader: a map/message for the proxy
// is checked and delivered to the local agent. Bad input is counted and
// dropped; it changes nothing.
func (p *proxy) onNotify(method string, params json.RawMessage) {
	if method != "map/message" && method != "map/send" {
		return
	}
	l := p.h.l
	if err := p.inbound(params); err != nil {
		l.countInError()
		l.log.Debug("message from the foreign MAP server dropped", "agent", p.localID, "err", err)
	}
}

func (p *proxy) inbound(params json.RawMessage) error {
	l := p.h.l
	if len(params) > l.m.cfg.MaxEnvelopeBytes+64<<10 {
		return fmt.Errorf("map/message of %d bytes exceeds the federation limit", len(params))
	}
	msg, err := parseForeignMessage(params)
	if err != nil {
		return err
	}
	from, err := msg.sender()
	if err != nil {
		return err
	}
	if len(msg.Payload)+len(msg.Meta) > l.m.cfg.MaxEnvelopeBytes {
		return fmt.Errorf("message of %d bytes exceeds the federation limit of %d", len(msg.Payload)+len(msg.Meta), l.m.cfg.MaxEnvelopeBytes)
	}
	if len(msg.Meta) > 0 && string(msg.Meta) != "null" && msg.Meta[0] != '{' {
		return errors.New("message meta is not an object")
	}
	svc := l.m.deps.Services
	isService := svc != nil && svc.IsService(p.localID)
	if !isService && !p.h.exported(p.localID) {
		return fmt.Errorf("agent %s is not exported to system %s", p.localID, l.peer)
	}
	p.mu.Lock()
	meta, open := pairAnswer(msg.Meta, p.pending[from], l.m.now())
	if len(open) == 0 {
		delete(p.pending, from)
	} else {
		p.pending[from] = open
	}
	p.mu.Unlock()
	if string(meta) == "null" {
		meta = nil
	}
	id := msg.ID
	if id == "" || len(id) > maxForeignIDBytes {
		id = ulid.Make().String()
	}
	ts := msg.Timestamp
	if ts <= 0 {
		ts = l.m.now().UnixMilli()
	}
	env := &concordv1.FedEnvelope{SourceSystem: l.peer, TargetSystem: l.m.cfg.SystemID, HopCount: 1, MaxHops: DefaultMaxHops,
		Path: []string{l.peer}, OriginTsMs: ts, MessageId: id, From: from, ToAgent: p.localID, Payload: msg.Payload, Meta: meta}
	l.m.countReceived(l.peer, 1, false)
	if isService {
		p.deliverService(svc, env)
		return nil
	}
	l.m.deps.Deliver.DeliverAgent(p.h.ctx, p.localID, BuildMessage(env), func(err error) {
		if err != nil {
			l.countInError()
			l.log.Debug("deliver a message from the foreign MAP server", "agent", p.localID, "err", err)
		}
	})
	return nil
}

// deliverService hands an answer to a local service (the runs service
// takes agents' answers to run tasks) on a goroutine of the holder's: a
// service may wait for a Raft commit, and this runs on the connection's
// reader. The proxy's goroutine, alive while its reader is, keeps the
// wait group above zero.
func (p *proxy) deliverService(svc ServiceDeliverer, env *concordv1.FedEnvelope) {
	l := p.h.l
	params, from := BuildServiceParams(env), RemoteID(env.GetSourceSystem(), env.GetFrom())
	p.h.wg.Go(func() {
		ctx, cancel := context.WithTimeout(p.h.ctx, l.m.cfg.CallTimeout)
		defer cancel()
		if cerr := svc.DeliverService(ctx, p.localID, from, params); cerr != nil {
			l.countInError()
			l.log.Debug("a local service refused a message from the foreign MAP server", "service", p.localID, "err", cerr)
		}
	})
}
