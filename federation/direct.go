package federation

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Direct streams. A message that crosses the main stream lands on
// whichever peer server that stream reached, which relays it to the
// server holding the target agent's connection: ~0.17 ms a leg on the
// WAN benchmark (PERFORMANCE.md). The peer exports each agent's home
// server (FedRemoteAgent.home_addr), so a sending node can open a stream
// to that server instead and skip the relay. Rules:
//
//   - Only best-effort messages to one agent of the link's own peer go
//     direct. Guaranteed ones keep the outbox path (the leader's stream
//     and its strict seq order, guaranteed_order.go); scopes and messages
//     in transit to a third system keep the main stream.
//   - The home must be one of the peer's listed servers (the link's
//     peer_addrs), and not the main stream's own server. At most one
//     direct stream per listed server; it runs with the main stream's
//     credentials and the same checks (the welcome must name the peer,
//     the peer checks this system's certificate), buffer bounds, acks
//     and ack timeout.
//   - A direct stream opens lazily: the message that asks for it still
//     takes the main stream, later ones go direct once it is up. It
//     closes after Config.DirectIdle with nothing in it.
//   - Order per target: a target's messages move to another stream only
//     when the stream its last ones took holds nothing (no message
//     queued or awaiting its ack; checked over the whole stream, which
//     is stricter), so every earlier one was answered before the first
//     on the new stream leaves.
//   - A direct stream that cannot be opened is not tried again for a
//     backoff; one that breaks answers its unacknowledged messages 5000
//     (outcome unknown, as on the main stream) and hands what it still
//     queues to the main stream, in order; their targets are back on the
//     main stream.
//
// The receiving server delivers as it does for the main stream: to the
// agent's connection when it holds it, else (the agent moved meanwhile)
// through its system's router.

// directs is a main link's set of direct streams.
//
// Lock order: mu, then any outLink.mu (the main link's or a direct
// one's); never the reverse.
type directs struct {
	mu     sync.Mutex
	byAddr map[string]*outLink // opening or up, by peer server address
	// on maps a target agent to the direct stream its last messages took;
	// absent: the main stream.
	on map[string]*outLink
	// retry holds back a new attempt at a server whose stream failed.
	retry map[string]directRetry
	// sentGone counts envelopes sent by direct streams since closed.
	sentGone uint64
	wake     chan struct{} // cap 1: a stream was asked for
}

type directRetry struct {
	fails int
	at    time.Time
}

func newDirects() *directs {
	return &directs{byAddr: map[string]*outLink{}, on: map[string]*outLink{}, retry: map[string]directRetry{},
		wake: make(chan struct{}, 1)}
}

// errDirectIdle ends a direct stream's session after Config.DirectIdle
// with nothing sent.
var errDirectIdle = errors.New("federation: direct stream idle")

// send hands env to the stream it should take: a direct stream to its
// target's home server when the rules allow, else this (main) link.
func (l *outLink) send(env *concordv1.FedEnvelope, done func(Outcome)) {
	it := &item{env: env, size: envSize(env), at: l.m.now(), done: done}
	if !l.m.cfg.DirectStreams || l.dir == nil || env.GetToAgent() == "" || env.GetTargetSystem() != l.peer {
		l.admit(it).finish()
		return
	}
	home := l.m.deps.State.RemoteHome(l.peer, env.GetToAgent())
	l.dir.mu.Lock()
	a := l.pick(env.GetToAgent(), home).admit(it)
	l.dir.mu.Unlock()
	a.finish()
}

// pick chooses the stream for target's next message: the direct stream
// to home when it is up, else the main stream; but a target stays on the
// stream its last messages took until that stream holds nothing.
// l.dir.mu held.
func (l *outLink) pick(target, home string) *outLink {
	want := l
	if d := l.directFor(home); d != nil {
		want = d
	}
	cur := l.dir.on[target]
	if cur == nil {
		cur = l
	}
	if cur == want {
		return want
	}
	if !cur.quiet() {
		return cur
	}
	if want == l {
		delete(l.dir.on, target)
	} else {
		l.dir.on[target] = want
	}
	return want
}

// directFor returns the direct stream to home when it is up; else nil,
// after asking for one when home is a listed server of the peer other
// than the main stream's and no backoff holds it back. l.dir.mu held.
func (l *outLink) directFor(home string) *outLink {
	if home == "" {
		return nil
	}
	l.mu.Lock()
	ok := !l.stopped && home != l.connectedTo && slices.Contains(l.link.GetPeerAddrs(), home)
	l.mu.Unlock()
	if !ok {
		return nil
	}
	if d := l.dir.byAddr[home]; d != nil {
		if d.usable() {
			return d
		}
		return nil
	}
	if r, held := l.dir.retry[home]; held && l.m.now().Before(r.at) {
		return nil
	}
	d := newOutLink(l.m, l.policy())
	d.home, d.parent, d.dir = home, l, nil
	d.log = l.log.With("direct", home)
	l.dir.byAddr[home] = d
	select {
	case l.dir.wake <- struct{}{}:
	default:
	}
	return nil
}

// usable reports whether a direct stream is up and takes messages.
func (l *outLink) usable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up && !l.stopped
}

// quiet reports whether the link holds no message: none queued, relayed
// or awaiting its ack.
func (l *outLink) quiet() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buf.items) == 0 && len(l.inflight) == 0 && len(l.relayQ) == 0
}

// directLoop starts the sessions of the direct streams pick asked for,
// each with a context of its own under ctx (the main link's run), and
// waits for them when ctx ends.
func (l *outLink) directLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.dir.wake:
		}
		l.dir.mu.Lock()
		for _, d := range l.dir.byAddr {
			if d.end != nil {
				continue
			}
			dctx, cancel := context.WithCancel(ctx)
			d.end = cancel
			wg.Go(func() { defer cancel(); d.runDirect(dctx) })
		}
		l.dir.mu.Unlock()
	}
}

// runDirect runs a direct stream's one session; when it ends the stream
// is closed for good (the next message for its server asks again).
func (l *outLink) runDirect(ctx context.Context) {
	link := l.policy()
	if !slices.Contains(link.GetPeerAddrs(), l.home) {
		l.retire(directFailed)
		return
	}
	wasUp, err := l.session(ctx, link, l.home)
	if !wasUp {
		l.log.Debug("federation direct stream not opened", "err", err)
		l.retire(directFailed)
		return
	}
	l.log.Debug("federation direct stream ended", "err", err)
	l.retire(directBroken) // no-op when disconnected did it
}

// directUp marks a direct stream up (no link events: the link's state is
// its main stream's).
func (l *outLink) directUp() {
	l.mu.Lock()
	l.up, l.connectedTo = true, l.home
	l.reconnects++
	l.lastUse = l.m.now()
	l.mu.Unlock()
	l.signal()
	l.log.Debug("federation direct stream up")
}

// Why a direct stream closes.
type directEnd int

const (
	directIdle   directEnd = iota // nothing in it for DirectIdle
	directBroken                  // its session ended after it was up
	directFailed                  // it could not be opened
)

// retire closes a direct stream for good (idempotent): its targets go
// back to the main stream, what it still queues moves there in order and
// what awaits an ack answers 5000. With directIdle it does so only when
// the stream holds nothing and was not used for DirectIdle, and reports
// whether it did.
func (l *outLink) retire(why directEnd) bool {
	p := l.parent
	now := l.m.now()
	p.dir.mu.Lock()
	l.mu.Lock()
	if l.stopped || (why == directIdle &&
		(len(l.buf.items) > 0 || len(l.inflight) > 0 || now.Sub(l.lastUse) < l.m.cfg.DirectIdle)) {
		l.mu.Unlock()
		p.dir.mu.Unlock()
		return false
	}
	l.stopped, l.up, l.connectedTo = true, false, ""
	l.stopErr = codeErr(CodeUnavailable, "Federation direct stream to "+l.peer+" closed", map[string]any{"retryable": true, "systemId": l.peer})
	fl := l.inflight
	l.inflight = map[uint64]*inflight{}
	queued := l.buf.takeAll()
	sent := l.sent
	l.mu.Unlock()
	if p.dir.byAddr[l.home] == l {
		delete(p.dir.byAddr, l.home)
	}
	for t, d := range p.dir.on {
		if d == l {
			delete(p.dir.on, t)
		}
	}
	p.dir.sentGone += sent
	switch why {
	case directIdle:
		delete(p.dir.retry, l.home)
	case directBroken:
		p.dir.retry[l.home] = directRetry{fails: 1, at: now.Add(jitter(0, l.m.cfg.BackoffMin, l.m.cfg.BackoffMax))}
	case directFailed:
		r := p.dir.retry[l.home]
		r.fails++
		r.at = now.Add(jitter(r.fails, l.m.cfg.BackoffMin, l.m.cfg.BackoffMax))
		p.dir.retry[l.home] = r
	}
	moved := make([]admission, len(queued))
	for i, it := range queued {
		moved[i] = p.admit(it)
	}
	p.dir.mu.Unlock()
	for _, a := range moved {
		a.finish()
	}
	for _, f := range fl {
		if f.it.done != nil {
			f.it.done(Outcome{Err: codeErr(CodeUnavailable, "Federation direct stream to "+l.peer+" lost before the peer acknowledged; the message may or may not have been delivered",
				map[string]any{"retryable": true, "systemId": l.peer})})
		}
	}
	if why != directIdle {
		l.log.Debug("federation direct stream closed", "moved", len(queued), "unanswered", len(fl))
	}
	return true
}

// updateDirects gives the direct streams the link's new policy and closes
// those to servers the peer no longer lists.
func (l *outLink) updateDirects(link *concordv1.FedLink) {
	if l.dir == nil {
		return
	}
	l.dir.mu.Lock()
	defer l.dir.mu.Unlock()
	for addr, d := range l.dir.byAddr {
		d.mu.Lock()
		d.link = link
		d.mu.Unlock()
		if !slices.Contains(link.GetPeerAddrs(), addr) && d.end != nil {
			d.end()
		}
	}
	for addr := range l.dir.retry {
		if !slices.Contains(link.GetPeerAddrs(), addr) {
			delete(l.dir.retry, addr)
		}
	}
}

// directStats counts the direct streams up and the envelopes sent on
// direct streams so far.
func (l *outLink) directStats() (up uint32, sent uint64) {
	if l.dir == nil {
		return 0, 0
	}
	l.dir.mu.Lock()
	defer l.dir.mu.Unlock()
	sent = l.dir.sentGone
	for _, d := range l.dir.byAddr {
		d.mu.Lock()
		if d.up {
			up++
		}
		sent += d.sent
		d.mu.Unlock()
	}
	return up, sent
}
