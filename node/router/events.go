package router

import (
	"strconv"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// Event types the router produces (snake_case, map-protocol.md §5.5).
const (
	EventMessageSent      = "message_sent"
	EventMessageDelivered = "message_delivered"
	EventMessageFailed    = "message_failed"
)

// publish emits message_sent, then message_delivered (when at least one
// recipient was reached) and one message_failed per failed recipient, the
// latter two caused by the first. The payload rides in message_sent and
// message_delivered; the fan-out strips it for subscriptions without
// includeMessagePayloads.
func (r *Router) publish(from Sender, p *sendParams, res resolution, out *SendResult, ts int64) {
	e := eventCtx{sender: from.from(), messageID: out.MessageID, ts: ts, info: p.info}
	if from.AgentID != "" {
		e.subjects = []string{from.AgentID}
	}
	if res.scopeID != "" {
		e.scopes = []string{res.scopeID}
	}
	sentID := r.publishSent(&e, p, res.recipients)
	if len(out.Delivered) > 0 {
		r.publishDelivered(&e, p, out.Delivered, sentID)
	}
	for _, f := range out.Failed {
		r.publishFailed(&e, f, sentID)
	}
}

// eventCtx is what the three message events of one send share.
type eventCtx struct {
	sender, messageID string
	ts                int64
	info              metaInfo
	subjects          []string // the sending agent, if any
	scopes            []string
}

func (e *eventCtx) event(typ string, data []byte, agents []string, causedBy string) registry.Event {
	ev := registry.Event{ID: ulid.Make().String(), Type: typ, Timestamp: e.ts, Source: e.sender,
		Data: data, AgentIDs: agents, ScopeIDs: e.scopes}
	if causedBy != "" {
		ev.CausedBy = []string{causedBy}
	}
	return ev
}

func (r *Router) publishSent(e *eventCtx, p *sendParams, recipients []recipient) string {
	b := messageHead(nil, e.messageID, e.sender, e.ts)
	b = append(b, `,"to":`...)
	b = append(b, p.to...)
	b = appendCorrelation(b, e.info)
	if e.info.priority != "" {
		b = append(b, `,"priority":`...)
		b = jsonkit.AppendString(b, e.info.priority)
	}
	b = appendPayload(b, p)
	agents := append([]string(nil), e.subjects...)
	for _, rc := range recipients {
		if rc.agentID != "" {
			agents = append(agents, rc.agentID)
		}
	}
	ev := e.event(EventMessageSent, append(b, '}'), agents, "")
	r.events.PublishEphemeral(ev)
	return ev.ID
}

func (r *Router) publishDelivered(e *eventCtx, p *sendParams, delivered []string, sentID string) {
	b := messageHead(nil, e.messageID, e.sender, e.ts)
	b = append(b, `,"deliveredTo":[`...)
	for i, id := range delivered {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonkit.AppendString(b, id)
	}
	b = append(b, ']')
	b = appendCorrelation(b, e.info)
	b = appendPayload(b, p)
	agents := append(append([]string(nil), e.subjects...), delivered...)
	r.events.PublishEphemeral(e.event(EventMessageDelivered, append(b, '}'), agents, sentID))
}

func (r *Router) publishFailed(e *eventCtx, f FailedRecipient, sentID string) {
	b := messageHead(nil, e.messageID, e.sender, e.ts)
	b = append(b, `,"to":`...)
	b = jsonkit.AppendString(b, f.ID)
	b = append(b, `,"reason":`...)
	b = jsonkit.AppendString(b, f.Reason)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, rpc.CodeDeliveryFailed, 10)
	agents := append(append([]string(nil), e.subjects...), f.ID)
	r.events.PublishEphemeral(e.event(EventMessageFailed, append(b, '}'), agents, sentID))
}

func messageHead(b []byte, messageID, from string, ts int64) []byte {
	b = append(b, `{"messageId":`...)
	b = jsonkit.AppendString(b, messageID)
	b = append(b, `,"from":`...)
	b = jsonkit.AppendString(b, from)
	b = append(b, `,"timestamp":`...)
	return strconv.AppendInt(b, ts, 10)
}

func appendCorrelation(b []byte, info metaInfo) []byte {
	if info.correlationID == "" {
		return b
	}
	b = append(b, `,"correlationId":`...)
	return jsonkit.AppendString(b, info.correlationID)
}

func appendPayload(b []byte, p *sendParams) []byte {
	if p.payload == nil {
		return b
	}
	b = append(b, `,"payload":`...)
	return append(b, p.payload...)
}
