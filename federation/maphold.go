package federation

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// maxProxies bounds the proxy sessions one map link opens on the foreign
// server (exported agents plus senders).
const maxProxies = 1024

// holding is a map link while this node holds it: the watcher session and
// the proxy sessions, all stopped when the role's context ends. Lock
// order: h.mu before a proxy's p.mu (neither is held while calling the
// link's l.mu).
type holding struct {
	l      *mapLink
	ctx    context.Context
	link   *concordv1.FedLink
	marker string // "<node>/<epoch>": tags this holder's proxies on the foreign server

	mu      sync.Mutex
	proxies map[string]*proxy // by local agent id
	watchUp bool
	wg      sync.WaitGroup
}

// runHolder runs the link on this node until ctx ends (the holder moved,
// the link changed or stopped). Messages buffered while this node was a
// forwarder move to their proxies; when the role ends, what the proxies
// still hold moves back to the buffer, in order, for the next holder.
func (l *mapLink) runHolder(ctx context.Context, link *concordv1.FedLink) {
	if l.m.deps.MAPDial == nil {
		l.log.Warn("map link not held: this node has no MAP dialer")
		<-ctx.Done()
		return
	}
	h := &holding{l: l, ctx: ctx, link: link, proxies: map[string]*proxy{},
		marker: l.m.cfg.NodeID + "/" + strconv.FormatUint(link.GetMap().GetHolderEpoch(), 10)}
	l.mu.Lock()
	l.hold = h
	items := l.buf.takeAll()
	l.mu.Unlock()
	l.log.Info("holding map link", "url", RedactURL(link.GetMap().GetUrl()), "epoch", link.GetMap().GetHolderEpoch())
	for _, it := range items {
		h.enqueueItem(it)
	}
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.watch() }()
	tick := time.NewTicker(l.m.cfg.DirectorySync)
	defer tick.Stop()
	for {
		h.reconcileProxies()
		select {
		case <-ctx.Done():
			h.release()
			return
		case <-tick.C:
		}
	}
}

// release stops the proxies and gives their waiting messages back to the
// link's buffer.
func (h *holding) release() {
	h.l.mu.Lock()
	h.l.hold = nil
	h.l.mu.Unlock()
	h.mu.Lock()
	ps := h.proxies
	h.proxies = map[string]*proxy{}
	h.mu.Unlock()
	for _, p := range ps {
		p.cancel()
	}
	h.wg.Wait()
	for _, p := range ps {
		for _, it := range p.close() {
			h.l.requeue(it)
		}
	}
	h.l.signal()
	h.l.log.Info("released map link")
}

// requeue puts it back in the link's buffer for the next holder (or fails
// it when the link is stopped).
func (l *mapLink) requeue(it *item) {
	l.mu.Lock()
	if l.stopped { // the link is gone: nobody drains the buffer
		err := l.stopErr
		l.mu.Unlock()
		tell([]*item{it}, Outcome{Err: err})
		return
	}
	dropped, refuse := l.buf.push(it, l.bufferPolicy(), it.at)
	l.mu.Unlock()
	tellDropped(dropped)
	if refuse != nil && it.done != nil {
		it.done(Outcome{Err: refuse})
	}
	l.signal()
}

// exported reports whether local agent id is exported over the link.
func (h *holding) exported(id string) bool {
	a, ok := h.l.m.deps.Local.Agent(id)
	return ok && Matches(h.link.GetExport(), agentView(a))
}

// reconcileProxies opens a proxy for every exported local agent and
// closes those of agents no longer exported (senders' proxies stay).
func (h *holding) reconcileProxies() {
	want := map[string]*concordv1.FedRemoteAgent{}
	for _, a := range h.l.m.deps.Local.Agents() {
		if Matches(h.link.GetExport(), agentView(a)) {
			want[a.GetId()] = a
		}
	}
	h.mu.Lock()
	var gone []*proxy
	for id, p := range h.proxies {
		if _, ok := want[id]; !ok && p.exported {
			delete(h.proxies, id)
			gone = append(gone, p)
		}
	}
	for id, a := range want {
		if p, ok := h.proxies[id]; ok {
			p.exported = true
			continue
		}
		if len(h.proxies) >= maxProxies {
			break
		}
		h.startProxy(id, a, true)
	}
	h.mu.Unlock()
	for _, p := range gone {
		p.cancel()
		tell(p.close(), Outcome{Err: codeErr(CodeNotExported, "Agent "+p.localID+" is no longer exported to system "+h.l.peer, nil)})
	}
}

// startProxy starts the proxy session of local agent id. Caller holds h.mu.
func (h *holding) startProxy(id string, a *concordv1.FedRemoteAgent, exported bool) *proxy {
	pctx, cancel := context.WithCancel(h.ctx)
	p := &proxy{h: h, localID: id, agent: a, exported: exported, cancel: cancel,
		wake: make(chan struct{}, 1), pending: map[string][]pairing{}}
	h.proxies[id] = p
	h.wg.Add(1)
	go func() { defer h.wg.Done(); p.run(pctx) }()
	return p
}

// enqueue gives env to the proxy of its sender, opening one for a sender
// that has none (a sender need not be exported: the foreign server
// stamps each message with its session's agent, so every sender needs
// its own session there).
func (h *holding) enqueue(env *concordv1.FedEnvelope, done func(Outcome)) {
	h.enqueueItem(&item{env: env, size: envSize(env), at: h.l.m.now(), done: done})
}

func (h *holding) enqueueItem(it *item) {
	from := it.env.GetFrom()
	h.mu.Lock()
	p := h.proxies[from]
	if p == nil && h.ctx.Err() == nil && len(h.proxies) < maxProxies {
		a, ok := h.l.m.deps.Local.Agent(from)
		if !ok {
			a = &concordv1.FedRemoteAgent{Id: from}
		}
		p = h.startProxy(from, a, false)
	}
	h.mu.Unlock()
	if p == nil && h.ctx.Err() != nil {
		h.l.requeue(it) // the role ended meanwhile
		return
	}
	if p == nil {
		if it.done != nil {
			it.done(Outcome{Err: codeErr(CodeUnavailable, fmt.Sprintf("Federation link to %s: no proxy session for %s (at most %d)", h.l.peer, from, maxProxies),
				map[string]any{"retryable": true})})
		}
		return
	}
	if !p.push(it) {
		h.l.requeue(it) // the role ended meanwhile
	}
}

func (h *holding) fill(st *concordv1.FedLinkStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st.State = "connecting"
	if h.watchUp {
		st.State = "up"
		st.StreamsUp++
	}
	for _, p := range h.proxies {
		if p.isUp() {
			st.ProxiesUp++
		}
		p.mu.Lock()
		st.QueueDepth += uint32(len(p.queue.items))
		st.QueueBytes += uint64(p.queue.bytes)
		st.Dropped += p.queue.dropped
		p.mu.Unlock()
	}
}

func (h *holding) setWatchUp(up bool) {
	h.mu.Lock()
	h.watchUp = up
	h.mu.Unlock()
}

// proxyIDs returns the foreign ids of this holder's registered proxies.
func (h *holding) proxyIDs() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for _, p := range h.proxies {
		if id := p.foreign(); id != "" {
			out[id] = true
		}
	}
	return out
}

// proxyOf returns the proxy of local agent id.
func (h *holding) proxyOf(id string) *proxy {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.proxies[id]
}
