package federation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Manager runs this node's side of every link: one outbound stream per
// linked system (outLink), the inbound streams peers opened to this node,
// and the admin, peering and routing entry points. Build it with New,
// register its service on the node's gRPC server (Register), Run it on a
// goroutine the node owns, and stop it by cancelling Run's context.
type Manager struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	out     map[string]*outLink // by peer system id
	maps    map[string]*mapLink // links of kind map, by peer system id
	inbound map[string]int      // open inbound streams per peer system
	recv    map[string]uint64   // envelopes received per peer system
	// recvDirect counts those of recv that came on direct streams.
	recvDirect map[string]uint64
	wg         sync.WaitGroup
	// closing is closed by Close: inbound streams end so the gRPC server
	// can stop gracefully.
	closing   chan struct{}
	closeOnce sync.Once

	// Guaranteed delivery (guaranteed.go): senders waiting for their
	// ack by message id, messages being delivered or recorded here, and
	// the goroutines that store guaranteed sends (stopped by Run's exit).
	gmu      sync.Mutex
	gwait    map[string]chan Outcome
	gactive  map[gkey]gentry
	gclosed  bool
	bg       context.Context
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup

	// Gateway barrier rounds (afterBarrier); bmu guards both.
	bmu      sync.Mutex
	bwaiting []func()
	brunning bool

	gstats gatewayStats // SDK gateway counters (metrics)
}

// New validates cfg and deps.
func New(cfg Config, deps Deps) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
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
	bg, bgCancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, deps: deps, now: now,
		log: log.With("component", "federation", "node_id", cfg.NodeID, "system_id", cfg.SystemID),
		out: map[string]*outLink{}, maps: map[string]*mapLink{}, inbound: map[string]int{}, recv: map[string]uint64{}, recvDirect: map[string]uint64{},
		closing: make(chan struct{}),
		gwait:   map[string]chan Outcome{}, gactive: map[gkey]gentry{}, bg: bg, bgCancel: bgCancel,
	}
	deps.State.OnAck(m.onAcked)
	return m, nil
}

// Register registers the Federation gRPC service on s.
func (m *Manager) Register(s *grpc.Server) { concordv1.RegisterFederationServer(s, &service{m: m}) }

// SystemID is this node's system.
func (m *Manager) SystemID() string { return m.cfg.SystemID }

// Run keeps one outbound link per linked system in step with the
// replicated state until ctx ends, then stops them all and fails what
// they still hold.
func (m *Manager) Run(ctx context.Context) error {
	// The leader checks map link holders against live nodes, which change
	// without a state change.
	holders := time.NewTicker(m.cfg.Ping)
	defer holders.Stop()
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.retryUnlinks(ctx) }()
	for {
		changed := m.deps.State.Changed()
		m.reconcile(ctx)
		m.assignHolders(ctx)
		m.releaseGateways(ctx)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			links, maps := m.out, m.maps
			m.out, m.maps = map[string]*outLink{}, map[string]*mapLink{}
			m.mu.Unlock()
			stopErr := codeErr(CodeUnavailable, "federation stopped on this node", map[string]any{"retryable": true})
			for _, l := range links {
				l.stop(stopErr)
			}
			for _, l := range maps {
				l.stop(stopErr)
			}
			m.stopGuaranteed()
			m.wg.Wait()
			return ctx.Err()
		case <-changed:
		case <-holders.C:
		}
	}
}

// Close ends the inbound streams peers opened to this node (they move to
// another server); outbound links stop with Run's context. Idempotent.
func (m *Manager) Close() { m.closeOnce.Do(func() { close(m.closing) }) }

// reconcile starts links new in the state, updates changed ones and
// stops removed ones.
func (m *Manager) reconcile(ctx context.Context) {
	want := map[string]*concordv1.FedLink{}
	wantMap := map[string]*concordv1.FedLink{}
	for _, l := range m.deps.State.Links() {
		if isMapLink(l) {
			wantMap[l.GetPeerSystemId()] = l
		} else {
			want[l.GetPeerSystemId()] = l
		}
	}
	m.mu.Lock()
	var stopped []*outLink
	for peer, ol := range m.out {
		if _, ok := want[peer]; !ok {
			delete(m.out, peer)
			stopped = append(stopped, ol)
		}
	}
	stoppedMaps := m.reconcileMaps(ctx, wantMap)
	for peer, l := range want {
		if ol, ok := m.out[peer]; ok {
			ol.update(l)
			ol.signal() // the outbox may have grown
			continue
		}
		ol := newOutLink(m, l)
		m.out[peer] = ol
		m.wg.Add(1)
		go func() { defer m.wg.Done(); ol.run(ctx) }()
	}
	m.mu.Unlock()
	for _, ol := range stopped {
		ol.stop(codeErr(CodeSystemNotFound, "Federation link to "+ol.peer+" removed", map[string]any{"systemId": ol.peer}))
	}
	for _, ml := range stoppedMaps {
		ml.stop(codeErr(CodeSystemNotFound, "Federation link to "+ml.peer+" removed", map[string]any{"systemId": ml.peer}))
	}
}

// reconcileMaps does reconcile's work for links of kind map. Caller holds
// m.mu; it returns the links to stop.
func (m *Manager) reconcileMaps(ctx context.Context, want map[string]*concordv1.FedLink) []*mapLink {
	var stopped []*mapLink
	for peer, ml := range m.maps {
		if _, ok := want[peer]; !ok {
			delete(m.maps, peer)
			stopped = append(stopped, ml)
		}
	}
	for peer, l := range want {
		if ml, ok := m.maps[peer]; ok {
			ml.update(l)
			continue
		}
		ml := newMapLink(m, l)
		m.maps[peer] = ml
		m.wg.Add(1)
		go func() { defer m.wg.Done(); ml.run(ctx) }()
	}
	return stopped
}

// Message is one map/send bound for another system.
type Message struct {
	TargetSystem string
	// Exactly one of ToAgent and ToScope.
	ToAgent, ToScope string
	MessageID        string
	// From is the sender's id in this system.
	From          string
	Payload, Meta []byte
}

// Send hands msg to the link to its target system; done is called once
// with the outcome: delivered after the peer acknowledged, queued while
// the link is down, or a *CodeError (5001 no link, 5000 buffer refused,
// the peer's refusal). It never blocks on the network.
func (m *Manager) Send(msg Message, done func(Outcome)) {
	if !validSystemID(msg.TargetSystem) {
		done(Outcome{Err: codeErr(CodeInvalidParams, "invalid system id in federated address: "+msg.TargetSystem, nil)})
		return
	}
	if msg.TargetSystem == m.cfg.SystemID {
		done(Outcome{Err: codeErr(CodeInvalidParams, "federated address names this system", nil)})
		return
	}
	if n := len(msg.Payload) + len(msg.Meta); n > m.cfg.MaxEnvelopeBytes {
		done(Outcome{Err: codeErr(CodeInvalidParams, fmt.Sprintf("message of %d bytes exceeds the federation limit of %d", n, m.cfg.MaxEnvelopeBytes), nil)})
		return
	}
	m.mu.Lock()
	ml := m.maps[msg.TargetSystem]
	m.mu.Unlock()
	if ml != nil {
		m.sendMap(ml, msg, done)
		return
	}
	if b, ok := m.gatewayBinding(msg.TargetSystem); ok {
		m.gatewaySend(b, m.originate(msg, DefaultMaxHops), done)
		return
	}
	if m.unlinked(msg.TargetSystem) {
		// Perhaps a reply to a gateway bound a moment ago on another node.
		m.afterBarrier(func() {
			if b, ok := m.gatewayBinding(msg.TargetSystem); ok {
				m.gatewaySend(b, m.originate(msg, DefaultMaxHops), done)
				return
			}
			m.sendLinked(msg, done)
		})
		return
	}
	m.sendLinked(msg, done)
}

// sendLinked sends msg over the link (direct or transitive) to its target.
func (m *Manager) sendLinked(msg Message, done func(Outcome)) {
	ol, cerr := m.route(msg.TargetSystem, "")
	if cerr != nil {
		done(Outcome{Err: cerr})
		return
	}
	env := m.originate(msg, maxHopsOf(ol.policy()))
	if m.deps.State.OutboxGuaranteed(msg.TargetSystem) || (mayAskGuarantee(msg.Meta) && wantsGuarantee(msg.Meta, nil)) {
		m.sendGuaranteed(env, ol, done)
		return
	}
	ol.send(env, done)
}

// mayAskGuarantee is false when meta cannot hold delivery "guaranteed":
// without a backslash a JSON string is spelt as is, so the word must
// appear. It spares most messages wantsGuarantee's JSON decoding.
func mayAskGuarantee(meta []byte) bool {
	return bytes.Contains(meta, []byte("guaranteed")) || bytes.IndexByte(meta, '\\') >= 0
}

// maxHopsOf is the hop bound of envelopes this system originates over link.
func maxHopsOf(link *concordv1.FedLink) uint32 {
	if h := link.GetMaxHops(); h > 0 {
		return h
	}
	return DefaultMaxHops
}

// originate builds the envelope of a message this system sends.
func (m *Manager) originate(msg Message, maxHops uint32) *concordv1.FedEnvelope {
	env := &concordv1.FedEnvelope{
		SourceSystem: m.cfg.SystemID, TargetSystem: msg.TargetSystem, MaxHops: maxHops,
		OriginTsMs: m.now().UnixMilli(), MessageId: msg.MessageID, From: msg.From,
		ToAgent: msg.ToAgent, ToScope: msg.ToScope, Payload: msg.Payload, Meta: msg.Meta,
	}
	Stamp(env, m.cfg.SystemID)
	return env
}

// gatewayBinding returns the SDK gateway serving target, unless target
// has a link of its own (a link always wins).
func (m *Manager) gatewayBinding(target string) (*concordv1.FedGatewayBinding, bool) {
	if m.deps.State.HasLink(target) || m.deps.Sessions == nil {
		return nil, false
	}
	return m.deps.State.Gateway(target)
}

// gatewaySend hands env to the gateway of binding b with a deadline of
// its own (the caller may not wait).
func (m *Manager) gatewaySend(b *concordv1.FedGatewayBinding, env *concordv1.FedEnvelope, done func(Outcome)) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CallTimeout)
	m.sendToGateway(ctx, b, env, func(o Outcome) { cancel(); done(o) })
}

// route picks the link a message for target leaves by: the direct link
// when there is one, else (transitive routing) the first transitive link
// by peer id other than the one it came in by. A message in transit
// (inbound set) may only leave by a transitive link.
func (m *Manager) route(target, inbound string) (*outLink, *CodeError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ol := m.out[target]; ol != nil {
		if inbound != "" && !ol.policy().GetTransitive() {
			return nil, codeErr(CodeNotExported, "Federation route rejected: the link from "+m.cfg.SystemID+" to "+target+" is not transitive",
				map[string]any{"systemId": target})
		}
		return ol, nil
	}
	var peers []string
	for p, ol := range m.out {
		if p != inbound && ol.policy().GetTransitive() {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		return nil, codeErr(CodeSystemNotFound, "Federation system not found: no link or transitive route from "+m.cfg.SystemID+" to "+target,
			map[string]any{"systemId": target})
	}
	slices.Sort(peers)
	return m.out[peers[0]], nil
}

// forward sends on an envelope that arrived from inbound for another
// system: both the inbound link and the outbound one must be transitive;
// the hop and loop rules apply (5010, 5011).
func (m *Manager) forward(env *concordv1.FedEnvelope, inbound string, done func(Outcome)) {
	if l, ok := m.deps.State.Link(inbound); !ok || !l.GetTransitive() {
		done(Outcome{Err: codeErr(CodeNotExported, "Federation route rejected: the link from "+inbound+" to "+m.cfg.SystemID+" is not transitive",
			map[string]any{"systemId": env.GetTargetSystem()})})
		return
	}
	if _, ok := m.gatewayBinding(env.GetTargetSystem()); !ok && m.unlinked(env.GetTargetSystem()) {
		// Perhaps a reply to a gateway bound a moment ago on another node.
		m.afterBarrier(func() { m.forwardNow(env, inbound, done) })
		return
	}
	m.forwardNow(env, inbound, done)
}

// forwardNow forwards env (its inbound link allows it) to the gateway
// serving its target, else over the link towards it.
func (m *Manager) forwardNow(env *concordv1.FedEnvelope, inbound string, done func(Outcome)) {
	b, viaGateway := m.gatewayBinding(env.GetTargetSystem())
	var ol *outLink
	var cerr *CodeError
	if viaGateway {
		cerr = CheckForward(env, env.GetTargetSystem())
	} else if ol, cerr = m.route(env.GetTargetSystem(), inbound); cerr == nil {
		cerr = CheckForward(env, ol.peer)
	}
	if cerr != nil {
		done(Outcome{Err: cerr})
		return
	}
	env = proto.CloneOf(env)
	env.Seq = 0
	Stamp(env, m.cfg.SystemID)
	if viaGateway {
		m.gatewaySend(b, env, done)
		return
	}
	ol.enqueue(env, done)
}

// RemoteAgents lists the agents imported from peer (every peer when
// empty), in remote-id order per system.
func (m *Manager) RemoteAgents(peers []string) map[string][]*concordv1.FedRemoteAgent {
	out := map[string][]*concordv1.FedRemoteAgent{}
	for _, l := range m.deps.State.Links() {
		p := l.GetPeerSystemId()
		if len(peers) > 0 && !containsString(peers, p) {
			continue
		}
		out[p] = m.deps.State.Imported(p).GetAgents()
	}
	return out
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (m *Manager) inboundDelta(peer string, d int) {
	m.mu.Lock()
	m.inbound[peer] += d
	m.mu.Unlock()
}

func (m *Manager) countReceived(peer string, n int, direct bool) {
	m.mu.Lock()
	m.recv[peer] += uint64(n)
	if direct {
		m.recvDirect[peer] += uint64(n)
	}
	m.mu.Unlock()
}

// Status reports every link as this node sees it.
func (m *Manager) Status() []*concordv1.FedLinkStatus {
	var out []*concordv1.FedLinkStatus
	for _, l := range m.deps.State.Links() {
		p := l.GetPeerSystemId()
		st := &concordv1.FedLinkStatus{Link: Redacted(l), State: "down"}
		m.mu.Lock()
		ol, ml := m.out[p], m.maps[p]
		st.StreamsUp = uint32(m.inbound[p])
		st.Received, st.DirectReceived = m.recv[p], m.recvDirect[p]
		m.mu.Unlock()
		switch {
		case ol != nil:
			ol.fill(st)
		case ml != nil:
			ml.fill(st)
		}
		n, b := m.deps.State.OutboxSize(p)
		st.OutboxDepth, st.OutboxBytes = uint32(n), b
		im := m.deps.State.Imported(p)
		st.ImportedVersion, st.ImportedAgents = im.GetVersion(), uint32(len(im.GetAgents()))
		out = append(out, st)
	}
	return out
}

func (m *Manager) event(kind, peer string, data map[string]any) {
	if m.deps.Events != nil {
		m.deps.Events.FederationEvent(kind, peer, data)
	}
}

// State is the replicated federation state this manager runs from.
func (m *Manager) State() *State { return m.deps.State }
