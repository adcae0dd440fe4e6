package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/oklog/ulid/v2"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// GatewayCaller is the MAP gateway participant (SDK GatewayConnection)
// calling map/federation/connect or map/federation/route.
type GatewayCaller struct {
	// SessionID is its MAP session: messages this system sends to the
	// systems it routes for are delivered there.
	SessionID, ParticipantID string
	// SessionEpoch is the attach epoch its connection holds on SessionID
	// (0: unknown), which a bind quotes (FedGatewayBind.session_epoch).
	SessionEpoch uint64
	// Sources are the foreign systems its credential lets it route for
	// (claim as an envelope's source); Targets the systems it may route
	// to (this one, linked ones). "*" allows any.
	Sources, Targets []string
}

// SessionDeliverer delivers a message to a participant session of this
// system, on whichever node holds its connection; done is called once,
// with nil when the connection took it.
type SessionDeliverer interface {
	DeliverSession(ctx context.Context, sessionID string, msg json.RawMessage, done func(error))
}

// GatewayConnectResult is the SDK's FederationConnectResponseResult.
type GatewayConnectResult struct {
	Connected  bool              `json:"connected"`
	SystemID   string            `json:"systemId"`
	SessionID  string            `json:"sessionId,omitempty"`
	SystemInfo GatewaySystemInfo `json:"systemInfo"`
	// Status is "connected" when a stream to the linked system is up,
	// "disconnected" while messages to it wait in the outage buffer.
	Status string `json:"status"`
}

// GatewaySystemInfo names the system a gateway connected to.
type GatewaySystemInfo struct {
	Name string `json:"name"`
}

// GatewayRouteResult is the SDK's FederationRouteResponseResult plus where
// the message went (remote ids, as map/send reports them).
type GatewayRouteResult struct {
	Routed    bool     `json:"routed"`
	MessageID string   `json:"messageId"`
	Delivered []string `json:"delivered"`
	Queued    []string `json:"queued,omitempty"`
}

func allowed(list []string, system string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, system)
}

// GatewayConnect serves map/federation/connect {systemId, endpoint,
// auth?}: connected for this system and for a linked one (the link, not
// endpoint, says how to reach it: a gateway never makes this system dial
// an address of its choosing), 5001 for an unknown system, 5003 for one
// the caller's credential does not let it route to. auth is not needed:
// the gateway authenticated in map/connect.
func (m *Manager) GatewayConnect(c GatewayCaller, params json.RawMessage) (*GatewayConnectResult, *CodeError) {
	p, cerr := object(params, "params")
	if cerr != nil {
		return nil, cerr
	}
	sys, cerr := systemField(p, "systemId", true)
	if cerr != nil {
		return nil, cerr
	}
	if _, cerr := stringField(p, "endpoint", "params"); cerr != nil {
		return nil, cerr
	}
	res := &GatewayConnectResult{Connected: true, SystemID: sys, SessionID: c.SessionID, SystemInfo: GatewaySystemInfo{Name: sys}, Status: "connected"}
	switch l, linked := m.deps.State.Link(sys); {
	case sys == m.cfg.SystemID:
	case linked && isMapLink(l):
		return nil, mapLinkRefusal(sys)
	case !linked:
		return nil, codeErr(CodeSystemNotFound, "Federation system not found: "+sys+" is neither this system ("+m.cfg.SystemID+") nor linked to it",
			map[string]any{"systemId": sys})
	default:
		m.mu.Lock()
		ol := m.out[sys]
		m.mu.Unlock()
		if ol == nil || !ol.isUp() {
			res.Status = "disconnected"
		}
	}
	if !allowed(c.Targets, sys) {
		return nil, codeErr(CodeNotExported, "Federation route rejected: the credential does not allow routing to system "+sys,
			map[string]any{"systemId": sys})
	}
	return res, nil
}

// GatewayRoute serves map/federation/route: it decodes any envelope form,
// checks the caller's allowlists (a source system the credential does not
// name is forged: 5002), hops (5011) and loops (5010), resolves the
// recipient (local agents, or the link or gateway towards the target),
// binds the source system to the caller's session so replies find their
// way back, and only then delivers. done is called once; a refusal
// changes nothing and delivers nothing.
func (m *Manager) GatewayRoute(ctx context.Context, c GatewayCaller, params json.RawMessage, done func(*GatewayRouteResult, *CodeError)) {
	m.gatewayRoute(ctx, c, params, func(res *GatewayRouteResult, cerr *CodeError) {
		if cerr != nil {
			m.gstats.refuse(cerr.Code)
		} else {
			m.gstats.routedIn.Add(1)
		}
		done(res, cerr)
	})
}

func (m *Manager) gatewayRoute(ctx context.Context, c GatewayCaller, params json.RawMessage, done func(*GatewayRouteResult, *CodeError)) {
	r, cerr := DecodeGatewayRoute(params, m.cfg.MaxEnvelopeBytes)
	if cerr == nil {
		cerr = m.checkGatewayRoute(c, r)
	}
	if cerr != nil {
		done(nil, cerr)
		return
	}
	env := r.envelope(m.now().UnixMilli())
	dispatch, cerr := m.gatewayDispatch(ctx, env)
	if cerr != nil {
		done(nil, cerr)
		return
	}
	if err := m.bindGateway(ctx, c, r.Source); err != nil {
		if errors.Is(err, ErrSessionMoved) {
			done(nil, codeErr(CodeSessionMoved, "Session moved on, retry", map[string]any{"reason": ReasonSessionMoved, "error": err.Error()}))
			return
		}
		done(nil, codeErr(CodeUnavailable, "Federation unavailable: could not record the gateway's route: "+err.Error(), map[string]any{"retryable": true}))
		return
	}
	dispatch(func(o Outcome) {
		switch {
		case o.Err != nil:
			done(nil, o.Err)
		case o.Queued:
			done(&GatewayRouteResult{Routed: true, MessageID: env.GetMessageId(), Delivered: []string{}, Queued: []string{recipientLabel(env)}}, nil)
		default:
			done(&GatewayRouteResult{Routed: true, MessageID: env.GetMessageId(), Delivered: o.Delivered}, nil)
		}
	})
}

// gatewayDispatch resolves where env goes and returns what sends it
// there: this system's agents, the link towards its target, or the SDK
// gateway serving its target.
func (m *Manager) gatewayDispatch(ctx context.Context, env *concordv1.FedEnvelope) (func(func(Outcome)), *CodeError) {
	target := env.GetTargetSystem()
	if target == m.cfg.SystemID {
		targets, cerr := m.gatewayTargets(env)
		if cerr != nil {
			return nil, cerr
		}
		return func(finish func(Outcome)) {
			m.deliverLocal(ctx, targets, BuildMessage(env), func(delivered []string, cerr *CodeError) {
				finish(Outcome{Delivered: delivered, Err: cerr})
			})
		}, nil
	}
	// One more hop from here to the target (or to the first system on
	// the way) must fit the budget.
	if cerr := CheckForward(env, target); cerr != nil {
		return nil, cerr
	}
	if l, ok := m.deps.State.Link(target); ok && isMapLink(l) {
		return nil, mapLinkRefusal(target)
	}
	if b, ok := m.gatewayBinding(target); ok {
		Stamp(env, m.cfg.SystemID)
		return func(finish func(Outcome)) { m.gatewaySend(b, env, finish) }, nil
	}
	ol, cerr := m.route(target, "")
	if cerr == nil {
		cerr = CheckForward(env, ol.peer)
	}
	if cerr != nil {
		return nil, cerr
	}
	Stamp(env, m.cfg.SystemID)
	return func(finish func(Outcome)) { ol.enqueue(env, finish) }, nil
}

// mapLinkRefusal: a gateway's envelopes do not continue to a foreign MAP
// system linked with a link of kind map (one foreign system relaying to
// another through Concord is not supported).
func mapLinkRefusal(sys string) *CodeError {
	return codeErr(CodeNotExported, "Federation route rejected: "+sys+" is a foreign MAP system (link of kind map); gateways reach this system and linked Concord systems only",
		map[string]any{"systemId": sys})
}

// checkGatewayRoute applies the rules that need no I/O.
func (m *Manager) checkGatewayRoute(c GatewayCaller, r *GatewayRoute) *CodeError {
	self := m.cfg.SystemID
	if r.Form == FormMessage {
		// A bare message names no source: it speaks for the one system
		// the credential allows, if it allows exactly one.
		if len(c.Sources) != 1 || c.Sources[0] == "*" {
			return invalid("a bare message names no source system: send an envelope (GatewayConnection with a routing config)", nil)
		}
		r.Source, r.Path, r.Arrival = c.Sources[0], []string{c.Sources[0]}, 1
	}
	if r.SystemID != self && r.SystemID != r.Target {
		return invalid("systemId "+r.SystemID+" names neither this system nor the envelope's target "+r.Target, nil)
	}
	_, linked := m.deps.State.Link(r.Source)
	switch {
	case r.Source == self:
		return codeErr(CodeAuthFailed, "Federation auth failed: a gateway cannot route for this system ("+self+")", map[string]any{"sourceSystem": r.Source})
	case linked:
		return codeErr(CodeAuthFailed, "Federation auth failed: "+r.Source+" is a linked Concord system; its messages come over its link",
			map[string]any{"sourceSystem": r.Source})
	case !allowed(c.Sources, r.Source):
		return codeErr(CodeAuthFailed, "Federation auth failed: the credential does not allow routing for system "+r.Source,
			map[string]any{"sourceSystem": r.Source})
	case r.Arrival > r.MaxHops:
		return codeErr(CodeMaxHopsExceeded, fmt.Sprintf("Max hops exceeded: %d of %d", r.Arrival, r.MaxHops),
			map[string]any{"hopCount": r.Arrival, "maxHops": r.MaxHops, "path": r.Path})
	case slices.Contains(r.Path, self):
		return codeErr(CodeLoopDetected, "Loop detected: "+self+" is already in the envelope's path", map[string]any{"path": r.Path, "systemId": self})
	case slices.Contains(r.Path, r.Target):
		return codeErr(CodeLoopDetected, "Loop detected: the target "+r.Target+" is already in the envelope's path", map[string]any{"path": r.Path, "systemId": r.Target})
	case !allowed(c.Targets, r.Target):
		return codeErr(CodeNotExported, "Federation route rejected: the credential does not allow routing to system "+r.Target,
			map[string]any{"systemId": r.Target})
	}
	return nil
}

// envelope is the route as a link envelope. The hop budget left is kept
// when the path the gateway tracked is shorter than its hop count.
func (r *GatewayRoute) envelope(nowMs int64) *concordv1.FedEnvelope {
	id := r.MessageID
	if id == "" {
		id = ulid.Make().String()
	}
	ts := r.OriginTsMs
	if ts <= 0 {
		ts = nowMs
	}
	n := uint32(len(r.Path))
	return &concordv1.FedEnvelope{
		SourceSystem: r.Source, TargetSystem: r.Target, Path: slices.Clone(r.Path), HopCount: n,
		MaxHops: r.MaxHops - (r.Arrival - n), OriginTsMs: ts, MessageId: id, From: r.From,
		ToAgent: r.ToAgent, ToScope: r.ToScope, Payload: r.Payload, Meta: r.Meta,
	}
}

// bindGateway records (once per change) that c serves source.
func (m *Manager) bindGateway(ctx context.Context, c GatewayCaller, source string) error {
	if b, ok := m.deps.State.Gateway(source); ok && b.GetSessionId() == c.SessionID {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	bind := &concordv1.FedGatewayBind{
		Binding: &concordv1.FedGatewayBinding{SystemId: source, SessionId: c.SessionID, ParticipantId: c.ParticipantID, BoundAtMs: m.now().UnixMilli()}}
	if m.quoteSessionEpochs(ctx) {
		// A bind whose forward is held until the gateway resumed elsewhere
		// (its client told the outcome is unknown) is refused then rather
		// than replacing a binding made since.
		bind.SessionEpoch = c.SessionEpoch
		if err := m.deps.State.bindCurrent(c.SessionID, c.SessionEpoch); err != nil {
			return err
		}
	}
	_, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_BIND, bind)
	if err == nil {
		m.log.Info("gateway bound", "peer", source, "session_id", c.SessionID, "participant_id", c.ParticipantID)
	}
	return err
}

// quoteSessionEpochs reports whether binds and unbinds may quote their
// session's epoch: every server enforces it (Deps.QuoteSessionEpochs).
func (m *Manager) quoteSessionEpochs(ctx context.Context) bool {
	return m.deps.QuoteSessionEpochs != nil && m.deps.QuoteSessionEpochs(ctx)
}

// gatewayTargets resolves a routed envelope's local recipients from this
// replica: 2001 for an unknown agent, 2002 for an unknown scope. Unlike
// envelopes from linked systems there is no barrier on a miss: a barrier
// is a Raft write on a follower, and a gateway must not be able to make
// one per message by naming agents that do not exist.
func (m *Manager) gatewayTargets(env *concordv1.FedEnvelope) ([]string, *CodeError) {
	if id := env.GetToAgent(); id != "" {
		if _, ok := m.deps.Local.Agent(id); !ok {
			return nil, codeErr(CodeAgentNotFound, "Agent not found: "+id+" in system "+m.cfg.SystemID, map[string]any{"agentId": id})
		}
		return []string{id}, nil
	}
	members, ok := m.deps.Local.ScopeMembers(env.GetToScope())
	switch {
	case !ok:
		return nil, codeErr(CodeScopeNotFound, "Scope not found: "+env.GetToScope()+" in system "+m.cfg.SystemID, map[string]any{"scopeId": env.GetToScope()})
	case len(members) == 0:
		return nil, codeErr(CodeDeliveryFailed, "Delivery failed: scope "+env.GetToScope()+" has no members", nil)
	}
	return members, nil
}

// sendToGateway delivers env to the gateway session of binding b.
func (m *Manager) sendToGateway(ctx context.Context, b *concordv1.FedGatewayBinding, env *concordv1.FedEnvelope, done func(Outcome)) {
	m.deps.Sessions.DeliverSession(ctx, b.GetSessionId(), buildMessage(env, true), func(err error) {
		if err != nil {
			done(Outcome{Err: codeErr(CodeUnavailable, "Federation unavailable: the gateway for system "+env.GetTargetSystem()+" is not connected",
				map[string]any{"systemId": env.GetTargetSystem(), "retryable": true})})
			return
		}
		m.gstats.routedOut.Add(1)
		done(Outcome{Delivered: []string{recipientLabel(env)}})
	})
}

// recipientLabel is an envelope's recipient as a remote id.
func recipientLabel(env *concordv1.FedEnvelope) string {
	if env.GetToAgent() != "" {
		return RemoteID(env.GetTargetSystem(), env.GetToAgent())
	}
	return env.GetTargetSystem() + ":scope:" + env.GetToScope()
}

// unlinked reports whether target has no direct link, so a message to it
// may be for an SDK gateway whose binding this node has not applied yet.
func (m *Manager) unlinked(target string) bool {
	return !m.deps.State.HasLink(target) && m.deps.Sessions != nil && m.deps.Barrier != nil
}

// afterBarrier calls fn once this node has applied everything committed
// before the call (Deps.Barrier), on a goroutine of the manager's. Calls
// that arrive while a barrier is in flight share the next one, so a burst
// of messages costs one barrier round, not one each.
func (m *Manager) afterBarrier(fn func()) {
	select {
	case <-m.closing: // shutting down: decide on what this node has
		fn()
		return
	default:
	}
	m.bmu.Lock()
	m.bwaiting = append(m.bwaiting, fn)
	if m.brunning {
		m.bmu.Unlock()
		return
	}
	m.brunning = true
	m.bmu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			m.bmu.Lock()
			round := m.bwaiting
			m.bwaiting = nil
			if len(round) == 0 {
				m.brunning = false
				m.bmu.Unlock()
				return
			}
			m.bmu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CallTimeout)
			m.wg.Add(1)
			go func() { // the barrier ends early when the manager closes
				defer m.wg.Done()
				select {
				case <-m.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := m.deps.Barrier(ctx); err != nil {
				m.log.Debug("gateway barrier", "err", err) // decide on what this node has
			}
			cancel()
			for _, fn := range round {
				fn()
			}
		}
	}()
}
