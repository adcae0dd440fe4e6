package registry

import "encoding/json"

// This file is the contract between the registry state module (this package)
// and its readers (node/mapsvc, node/router, node/fanout). The types are the
// replicated facts; readers get copies and never mutate state directly: every
// change is a Raft command proposed through the Store.

// Agent is one registered agent as MAP presents it (map-protocol.md §5.2).
// Open-ended MAP fields are kept as raw JSON so they round-trip unchanged.
type Agent struct {
	ID          string   `json:"id"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Role        string   `json:"role,omitempty"`
	Parent      string   `json:"parent,omitempty"`
	Scopes      []string `json:"scopes,omitempty"`
	State       string   `json:"state"`
	// OwnerID is the participant id that owns the agent; empty means orphaned
	// (rendered as JSON null by the MAP layer).
	OwnerID    string `json:"ownerId"`
	Visibility string `json:"visibility,omitempty"`
	// SessionID is the session that registered (or reclaimed) the agent.
	SessionID string `json:"-"`
	// HomeNode is the node id holding the owning session's connection; the
	// router delivers there. Empty for an orphaned agent.
	HomeNode string `json:"-"`
	// Lifecycle timestamps in ms since the Unix epoch (0 = unset).
	Lifecycle Lifecycle `json:"lifecycle"`
	// Raw MAP fields kept verbatim (nil when absent).
	Capabilities         json.RawMessage `json:"capabilities,omitempty"`
	CapabilityDescriptor json.RawMessage `json:"capabilityDescriptor,omitempty"`
	Environment          json.RawMessage `json:"environment,omitempty"`
	Metadata             json.RawMessage `json:"metadata,omitempty"`
	PermissionOverrides  json.RawMessage `json:"permissionOverrides,omitempty"`
	PersistentIdentity   json.RawMessage `json:"persistentIdentity,omitempty"`
	Relationships        json.RawMessage `json:"relationships,omitempty"`
	Meta                 json.RawMessage `json:"_meta,omitempty"`
}

// Lifecycle mirrors MAP's AgentLifecycle; times are ms since the epoch.
type Lifecycle struct {
	CreatedAt    int64  `json:"createdAt,omitempty"`
	StartedAt    int64  `json:"startedAt,omitempty"`
	StoppedAt    int64  `json:"stoppedAt,omitempty"`
	LastActiveAt int64  `json:"lastActiveAt,omitempty"`
	OrphanedAt   int64  `json:"orphanedAt,omitempty"`
	ExitReason   string `json:"exitReason,omitempty"`
}

// Scope is one MAP scope (map-protocol.md §5.3) plus its member agent ids.
type Scope struct {
	ID                string   `json:"id"`
	Name              string   `json:"name,omitempty"`
	Description       string   `json:"description,omitempty"`
	Parent            string   `json:"parent,omitempty"`
	JoinPolicy        string   `json:"joinPolicy,omitempty"`
	AutoJoinRoles     []string `json:"autoJoinRoles,omitempty"`
	Visibility        string   `json:"visibility,omitempty"`
	MessageVisibility string   `json:"messageVisibility,omitempty"`
	SendPolicy        string   `json:"sendPolicy,omitempty"`
	Persistent        bool     `json:"persistent"`
	AutoDelete        bool     `json:"autoDelete"`
	// OwnerID is the participant that created the scope.
	OwnerID  string          `json:"ownerId,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Members are agent ids, sorted.
	Members []string `json:"-"`
}

// Session is one participant session (map-protocol.md §3.4).
type Session struct {
	ID              string `json:"id"`
	ParticipantID   string `json:"participantId"`
	ParticipantType string `json:"participantType"`
	Name            string `json:"name,omitempty"`
	// HomeNode is the node holding the session's live connection; empty
	// while detached (disconnected, awaiting resume or expiry).
	HomeNode     string `json:"-"`
	Connected    bool   `json:"-"`
	CreatedAt    int64  `json:"createdAt"`
	LastActiveAt int64  `json:"lastActiveAt,omitempty"`
	ClosedAt     int64  `json:"closedAt,omitempty"`
	// DisconnectPolicy: AgentBehavior is unregister|orphan|grace-period.
	DisconnectPolicy DisconnectPolicy `json:"-"`
	// DetachedAt is when the live connection was lost (0 while connected).
	DetachedAt int64 `json:"-"`
	// ResumeTokenHash is the SHA-256 of the resume token issued at connect.
	ResumeTokenHash []byte `json:"-"`
	// Subscriptions owned by the session, ordered by id.
	Subscriptions []Subscription `json:"-"`
}

// DisconnectPolicy is the SDK's disconnectPolicy.
type DisconnectPolicy struct {
	AgentBehavior     string `json:"agentBehavior"`
	GracePeriodMs     int64  `json:"gracePeriodMs,omitempty"`
	NotifySubscribers bool   `json:"notifySubscribers,omitempty"`
}

// Subscription is a replicated subscription owned by a session. The filter
// and options are kept as the raw JSON the client sent (validated by the
// MAP layer before proposing).
type Subscription struct {
	ID        string          `json:"id"`
	SessionID string          `json:"sessionId"`
	Filter    json.RawMessage `json:"filter,omitempty"`
	Options   json.RawMessage `json:"options,omitempty"`
	CreatedAt int64           `json:"createdAt"`
	// CursorEventID / CursorSeq: the last event the subscriber is known to
	// have received (updated lazily by COMMAND_TYPE_SUBSCRIPTION_CURSOR), so
	// a resumed session replays from there (at-least-once; clients dedup by
	// eventId) and keeps numbering from CursorSeq+1.
	CursorEventID string `json:"-"`
	CursorSeq     uint64 `json:"-"`
}

// Event is one state-change event produced by Apply, identical on every
// replica: ID is the ULID the proposer put in the command, Timestamp the
// proposer's clock (ms), Position the index of the event in the replicated
// event log (strictly increasing, dense, never reused).
type Event struct {
	Position  uint64          `json:"-"`
	ID        string          `json:"id"`
	Type      string          `json:"type"` // snake_case MAP name: agent_registered, ...
	Timestamp int64           `json:"timestamp"`
	Source    string          `json:"source,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	CausedBy  []string        `json:"causedBy,omitempty"`
	// Subject lists the agent ids and scope ids the event is about, for
	// filter matching without decoding Data.
	AgentIDs []string `json:"-"`
	ScopeIDs []string `json:"-"`
	// change is what an agent_state_changed event's Data is made from
	// while the event sits in the registry's window (Data nil until it
	// is read: lazydata.go). Events handed out never have it set.
	change stateChange
}

// Reader is the read API of the registry state, implemented by *State. All
// methods are safe for concurrent use with Apply and return copies.
type Reader interface {
	Agent(id string) (Agent, bool)
	// Agents returns all agents sorted by id.
	Agents() []Agent
	// AgentsWhere returns agents matching pred, sorted by id.
	AgentsWhere(pred func(*Agent) bool) []Agent
	Children(parentID string) []Agent
	Scope(id string) (Scope, bool)
	Scopes() []Scope
	Session(id string) (Session, bool)
	Sessions() []Session

	// Events: the retained window of the replicated event log.
	//   EventsAfter returns up to limit events with Position > pos.
	//   PositionOf finds an event id in the window (ok=false once it has
	//   aged out, or if it never existed).
	//   Window reports the oldest retained and the last position.
	//   Notify returns a channel closed at the next appended event (get a
	//   fresh one after each wake-up); Apply never blocks on readers.
	EventsAfter(pos uint64, limit int) []Event
	PositionOf(eventID string) (pos uint64, ok bool)
	Window() (oldest, last uint64)
	Notify() <-chan struct{}
}
