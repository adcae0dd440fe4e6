package mapclient

import "encoding/json"

// Message is a MAP Message delivered by map/message.
type Message struct {
	ID        string          `json:"id"`
	From      string          `json:"from"`
	To        json.RawMessage `json:"to,omitempty"`
	Timestamp int64           `json:"timestamp,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Meta      MessageMeta     `json:"meta"`
}

// MessageMeta holds the MessageMeta fields the client reads; Raw keeps the
// whole object.
type MessageMeta struct {
	CorrelationID   string          `json:"correlationId,omitempty"`
	ExpectsResponse bool            `json:"expectsResponse,omitempty"`
	IsResult        bool            `json:"isResult,omitempty"`
	Timestamp       int64           `json:"timestamp,omitempty"`
	Raw             json.RawMessage `json:"-"`
}

// UnmarshalJSON keeps the raw object besides the known fields.
func (m *MessageMeta) UnmarshalJSON(b []byte) error {
	type plain MessageMeta
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = MessageMeta(p)
	m.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// Event is one map/event notification.
type Event struct {
	SubscriptionID string
	SequenceNumber uint64
	EventID        string
	Timestamp      int64
	// Type, Source and Data come from the event object.
	Type   string
	Source string
	Data   json.RawMessage
}

// eventParams is map/event's params.
type eventParams struct {
	SubscriptionID string `json:"subscriptionId"`
	SequenceNumber uint64 `json:"sequenceNumber"`
	EventID        string `json:"eventId"`
	Timestamp      int64  `json:"timestamp"`
	Event          struct {
		ID     string          `json:"id"`
		Type   string          `json:"type"`
		Source string          `json:"source,omitempty"`
		Data   json.RawMessage `json:"data,omitempty"`
	} `json:"event"`
}

func (p *eventParams) toEvent() Event {
	id := p.EventID
	if id == "" {
		id = p.Event.ID
	}
	return Event{SubscriptionID: p.SubscriptionID, SequenceNumber: p.SequenceNumber, EventID: id,
		Timestamp: p.Timestamp, Type: p.Event.Type, Source: p.Event.Source, Data: p.Event.Data}
}

// SendParams is map/send's params. To is an Address (e.g. AgentAddress).
type SendParams struct {
	To      any `json:"to"`
	Payload any `json:"payload,omitempty"`
	Meta    any `json:"meta,omitempty"`
}

// AgentAddress is the {agent: id} Address.
type AgentAddress struct {
	Agent string `json:"agent"`
}

// FederatedAddress is the {system, agent} Address: agent of another
// system, routed over the link to it.
type FederatedAddress struct {
	System string `json:"system"`
	Agent  string `json:"agent"`
}

// SendResult is map/send's result.
type SendResult struct {
	MessageID string   `json:"messageId"`
	Delivered []string `json:"delivered"`
}

// AgentSpec is map/agents/register's params. The client remembers it to
// register the agent again when a reconnect lands in a fresh session.
type AgentSpec struct {
	AgentID      string          `json:"agentId,omitempty"`
	Name         string          `json:"name,omitempty"`
	Role         string          `json:"role,omitempty"`
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// SessionInfo describes the current session.
type SessionInfo struct {
	SessionID     string
	ParticipantID string
	ResumeToken   string
	// URL is the server the client is connected to ("" while reconnecting).
	URL string
	// Capabilities is map/connect's capabilities object.
	Capabilities json.RawMessage
}

// ReconnectInfo describes a completed reconnect.
type ReconnectInfo struct {
	URL string
	// Resumed is true when the server resumed the old session (agents and
	// subscriptions kept), false when it opened a new one (the client
	// registered and subscribed again).
	Resumed   bool
	SessionID string
	// Lost is the error that ended the previous connection, if known.
	Lost error
}

// connectResult is what the client reads from map/connect's result.
type connectResult struct {
	SessionID     string          `json:"sessionId"`
	ParticipantID string          `json:"participantId"`
	ResumeToken   string          `json:"resumeToken"`
	Reconnected   bool            `json:"reconnected"`
	OwnedAgents   []string        `json:"ownedAgents"`
	Capabilities  json.RawMessage `json:"capabilities"`
}
