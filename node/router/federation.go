package router

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/rpc"
)

// Federation carries sends to agents and scopes of other systems: the
// fourth recipient kind (after local connections, peer nodes and local
// services). Implemented by *federation.Manager.
type Federation interface {
	SystemID() string
	// Send must call done exactly once and must not block on the network.
	Send(msg federation.Message, done func(federation.Outcome))
}

// fedTarget is an agent or scope of another system.
type fedTarget struct {
	system, agent, scope string
}

// label is the remote id reported in delivered / queued.
func (t *fedTarget) label() string {
	if t.agent != "" {
		return federation.RemoteID(t.system, t.agent)
	}
	return t.system + ":scope:" + t.scope
}

// resolveFederated resolves {system, agent|scope} and "sys:agent:id" /
// "sys:scope:id". This system's own id reads as a local address; another
// system needs federation (5001 without it, or without a link).
func (r *Router) resolveFederated(from Sender, system, agent, scope string) (resolution, error) {
	if r.fed != nil && system == r.fed.SystemID() {
		if agent != "" {
			return r.resolveAgent(agent)
		}
		return r.resolveScope(from, scope)
	}
	if r.fed == nil {
		return resolution{}, rpc.NewError(rpc.CodeFederationSystemNotFound, "Federation system not found: "+system+" (federation is off on this node)").
			WithDetails(map[string]any{"systemId": system})
	}
	return resolution{fed: &fedTarget{system: system, agent: agent, scope: scope}}, nil
}

// sendFederated hands a send to the target system's link. The result is
// honest: delivered once the remote system acknowledged delivery to the
// agent's connection, queued while the link is down, else an error with
// the remote or link code. With defer set the connection's reply waits
// (rpc.Defer) and the request goroutine is released at once.
func (r *Router) sendFederated(ctx context.Context, from Sender, p sendParams, t *fedTarget, deferReply bool) (any, error) {
	id := ulid.Make().String()
	setFrom := ""
	if p.info.hasFrom {
		setFrom = from.from() // clients never choose who a message is from
	}
	msg := federation.Message{
		TargetSystem: t.system, ToAgent: t.agent, ToScope: t.scope, MessageID: id, From: from.from(),
		Payload: p.payload,
		Meta:    appendMeta(nil, p.meta, p.info.hasTimestamp, r.now().UnixMilli(), setFrom),
	}
	if !deferReply {
		// Send's callers may reuse params once it returns (the runs driver
		// does), and a queued message outlives the call. A connection's
		// request (HandleSend) owns its params.
		msg.Payload = append([]byte(nil), p.payload...)
	}
	finish := func(o federation.Outcome) (any, error) {
		switch {
		case o.Err != nil:
			return nil, FederationError(o.Err)
		case o.Queued:
			return &SendResult{MessageID: id, Delivered: []string{}, Queued: []string{t.label()}}, nil
		}
		return &SendResult{MessageID: id, Delivered: o.Delivered}, nil
	}
	if deferReply {
		if d, ok := rpc.Defer(ctx); ok {
			r.fed.Send(msg, func(o federation.Outcome) { d.Reply(finish(o)) })
			return nil, nil
		}
	}
	ch := make(chan federation.Outcome, 1)
	r.fed.Send(msg, func(o federation.Outcome) { ch <- o })
	select {
	case o := <-ch:
		return finish(o)
	case <-ctx.Done():
		return nil, rpc.NewError(rpc.CodeFederationUnavailable, "Federation send interrupted: "+ctx.Err().Error())
	}
}

// FederationError is a federation refusal as the MAP error a participant
// gets.
func FederationError(e *federation.CodeError) error {
	out := rpc.NewError(e.Code, e.Message)
	if len(e.Data) > 0 {
		out = out.WithDetails(e.Data)
	}
	return out
}

// DeliverAgent delivers a message that arrived from another system to a
// local agent, on this node or relayed to its home node; done hears nil
// once the agent's connection took it, a *federation.CodeError 2001 for
// an unknown agent, else why not.
func (r *Router) DeliverAgent(ctx context.Context, agentID string, msg json.RawMessage, done func(error)) {
	a, ok := r.reg.Agent(agentID)
	if !ok {
		done(&federation.CodeError{Code: rpc.CodeAgentNotFound, Message: "Agent not found: " + agentID})
		return
	}
	rc := agentRecipient(&a)
	if r.perms != nil && r.recipientRestricted(&rc) && !r.perms.AcceptsFromSystem(sourceSystem(msg), &a) {
		done(&federation.CodeError{Code: rpc.CodePermissionDenied, Message: "Agent " + agentID + " does not accept messages from this system"})
		return
	}
	r.deliverFederated(ctx, rc, &Envelope{Message: msg, RecipientAgentID: rc.agentID, RecipientSessionID: rc.sessionID}, "agent "+agentID, done)
}

// DeliverSession delivers a message from another system to a participant
// session of this system (the SDK gateway serving that system), on this
// node or relayed to the session's home node; done hears nil once the
// session's connection took it.
func (r *Router) DeliverSession(ctx context.Context, sessionID string, msg json.RawMessage, done func(error)) {
	s, ok := r.reg.Session(sessionID)
	if !ok || s.ClosedAt != 0 {
		done(&federation.CodeError{Code: rpc.CodeDeliveryFailed, Message: "Delivery failed: session " + sessionID + " is closed"})
		return
	}
	rc := sessionRecipient(&s)
	r.deliverFederated(ctx, rc, &Envelope{Message: msg, RecipientSessionID: rc.sessionID}, "session "+sessionID, done)
}

func (r *Router) deliverFederated(ctx context.Context, rc recipient, env *Envelope, what string, done func(error)) {
	switch {
	case rc.reason != "":
		done(&federation.CodeError{Code: rpc.CodeDeliveryFailed, Message: "Delivery failed: " + what + " is " + rc.reason})
	case rc.homeNode == r.nodeID:
		done(deliveryErr(r.DeliverLocal(ctx, env)))
	case r.peers == nil:
		done(&federation.CodeError{Code: rpc.CodeDeliveryFailed, Message: "Delivery failed: no relay to node " + rc.homeNode})
	default:
		r.peers.Submit(ctx, rc.homeNode, env, func(err error) { done(deliveryErr(err)) })
	}
}

// deliveryErr is a failed federated delivery as the answer to the
// sending system: 2003 when the agent's connection could not take it (not
// connected, slow consumer), 5000 (retryable) when the relay to the
// agent's node inside this system failed, which says nothing about the
// agent: the sender may try again, and a guaranteed message is resent
// rather than dropped.
func deliveryErr(err error) error {
	if err == nil {
		return nil
	}
	reason := relayFailureReason(err)
	if errors.Is(err, ErrNotConnected) {
		reason = reasonNotConnected
	}
	if reason == reasonRelayFailed {
		return &federation.CodeError{Code: rpc.CodeFederationUnavailable, Message: "Delivery failed, try again: " + reason,
			Data: map[string]any{"retryable": true}}
	}
	return &federation.CodeError{Code: rpc.CodeDeliveryFailed, Message: "Delivery failed: " + reason}
}

// IsService reports whether id is a registered service (RegisterService):
// federation hands envelopes addressed to it to DeliverService.
func (r *Router) IsService(id string) bool {
	m := r.services.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[id]
	return ok
}

// DeliverService hands a map/send that arrived from another system to the
// local service id, as the remote agent from ("<system>:agent:<id>"): the
// service sees that remote id as the sending agent and the sender's system
// in Sender.SourceSystem, which no local session sets. The service's
// refusal crosses back as a *federation.CodeError (its code and message;
// MAP error details do not cross a link).
func (r *Router) DeliverService(ctx context.Context, id, from string, params json.RawMessage) *federation.CodeError {
	m := r.services.Load()
	if m == nil || (*m)[id] == nil {
		return &federation.CodeError{Code: rpc.CodeAgentNotFound, Message: "Agent not found: " + id}
	}
	sys, _, ok := federation.ParseRemoteID(from)
	if !ok {
		return &federation.CodeError{Code: rpc.CodeInvalidParams, Message: "sender is not a remote agent id: " + from}
	}
	sender := Sender{ParticipantID: from, ParticipantType: "agent", AgentID: from, SourceSystem: sys}
	if _, err := (*m)[id].HandleSend(ctx, sender, params); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) {
			return &federation.CodeError{Code: re.Code, Message: re.Message}
		}
		return &federation.CodeError{Code: rpc.CodeDeliveryFailed, Message: "Delivery failed: " + err.Error()}
	}
	return nil
}

// sourceSystem reads the sending system of a federated message: its from
// is "<system>:agent:<id>" (federation.RemoteID). "" when it is not.
func sourceSystem(msg json.RawMessage) string {
	var m struct {
		From string `json:"from"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return ""
	}
	sys, _, _ := federation.ParseRemoteID(m.From)
	return sys
}
