package router

import (
	"strconv"

	"github.com/oklog/ulid/v2"

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
	sender := from.from()
	var subjects []string
	if from.AgentID != "" {
		subjects = append(subjects, from.AgentID)
	}
	var scopes []string
	if res.scopeID != "" {
		scopes = []string{res.scopeID}
	}

	sentID := ulid.Make().String()
	b := messageHead(nil, out.MessageID, sender, ts)
	b = append(b, `,"to":`...)
	b = append(b, p.to...)
	b = appendCorrelation(b, p.info)
	if p.info.priority != "" {
		b = append(b, `,"priority":`...)
		b = appendString(b, p.info.priority)
	}
	b = appendPayload(b, p)
	all := append([]string(nil), subjects...)
	for _, rc := range res.recipients {
		if rc.agentID != "" {
			all = append(all, rc.agentID)
		}
	}
	r.events.PublishEphemeral(registry.Event{
		ID: sentID, Type: EventMessageSent, Timestamp: ts, Source: sender,
		Data: append(b, '}'), AgentIDs: all, ScopeIDs: scopes,
	})

	if len(out.Delivered) > 0 {
		b = messageHead(nil, out.MessageID, sender, ts)
		b = append(b, `,"deliveredTo":[`...)
		delivered := append([]string(nil), subjects...)
		for i, id := range out.Delivered {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
			delivered = append(delivered, id)
		}
		b = append(b, ']')
		b = appendCorrelation(b, p.info)
		b = appendPayload(b, p)
		r.events.PublishEphemeral(registry.Event{
			ID: ulid.Make().String(), Type: EventMessageDelivered, Timestamp: ts, Source: sender,
			Data: append(b, '}'), CausedBy: []string{sentID}, AgentIDs: delivered, ScopeIDs: scopes,
		})
	}

	for _, f := range out.Failed {
		b = messageHead(nil, out.MessageID, sender, ts)
		b = append(b, `,"to":`...)
		b = appendString(b, f.ID)
		b = append(b, `,"reason":`...)
		b = appendString(b, f.Reason)
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, rpc.CodeDeliveryFailed, 10)
		r.events.PublishEphemeral(registry.Event{
			ID: ulid.Make().String(), Type: EventMessageFailed, Timestamp: ts, Source: sender,
			Data: append(b, '}'), CausedBy: []string{sentID},
			AgentIDs: append(append([]string(nil), subjects...), f.ID), ScopeIDs: scopes,
		})
	}
}

func messageHead(b []byte, messageID, from string, ts int64) []byte {
	b = append(b, `{"messageId":`...)
	b = appendString(b, messageID)
	b = append(b, `,"from":`...)
	b = appendString(b, from)
	b = append(b, `,"timestamp":`...)
	return strconv.AppendInt(b, ts, 10)
}

func appendCorrelation(b []byte, info metaInfo) []byte {
	if info.correlationID == "" {
		return b
	}
	b = append(b, `,"correlationId":`...)
	return appendString(b, info.correlationID)
}

func appendPayload(b []byte, p *sendParams) []byte {
	if p.payload == nil {
		return b
	}
	b = append(b, `,"payload":`...)
	return append(b, p.payload...)
}
