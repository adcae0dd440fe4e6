package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// Config configures a Router. Start from DefaultConfig and set the
// collaborators; New validates it.
type Config struct {
	// NodeID is this node's id; an agent whose registry.Agent.HomeNode
	// equals it is delivered locally, any other home node goes through Peers.
	NodeID string

	// Registry is the replicated agent/scope/session state the addresses are
	// resolved against (read from the local replica, no linearizable read:
	// a send racing a registration may miss the new agent).
	Registry registry.Reader

	// Sessions gives the live connection of a session attached to this node.
	Sessions LocalSessions

	// Events receives message_sent / message_delivered / message_failed.
	// Optional: nil disables message events.
	Events EventSink

	// Peers forwards messages to recipients homed on other nodes. Optional:
	// nil (a single node) makes such recipients fail with DELIVERY_FAILED.
	Peers Peers

	// Federation carries sends to other systems' agents and scopes.
	// Optional: nil answers a federated address of another system with
	// FEDERATION_SYSTEM_NOT_FOUND (5001).
	Federation Federation

	// Permissions, optional, applies the agents' permission layer
	// (canMessage, acceptsFrom; node/access) to every send. nil allows all.
	Permissions Permissions

	// Logger is the parent logger; nil discards.
	Logger *slog.Logger

	// Now returns the current time; for tests. nil means time.Now.
	Now func() time.Time
}

// Permissions decides whether a sender may message an agent or a scope
// (map-protocol.md §7 agent permissions). Called on the sending node with
// its local replica, so every node decides alike.
type Permissions interface {
	// SenderRestricted reports whether any agent the sender speaks for
	// has permissions that may refuse a target; when not, only
	// recipients with permissions of their own are checked.
	SenderRestricted(from Sender) bool
	MayMessage(from Sender, to *registry.Agent) bool
	MaySendToScope(from Sender, sc *registry.Scope) bool
	// AcceptsFromSystem applies to's acceptsFrom.systems to a message
	// that arrived from another system (federation).
	AcceptsFromSystem(system string, to *registry.Agent) bool
}

// DefaultConfig returns a Config with no collaborators set; NodeID, Registry
// and Sessions must be filled in before New.
func DefaultConfig() Config { return Config{} }

// Validate reports a missing required field.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return fmt.Errorf("%w: NodeID is required", ErrInvalidConfig)
	case c.Registry == nil:
		return fmt.Errorf("%w: Registry is required", ErrInvalidConfig)
	case c.Sessions == nil:
		return fmt.Errorf("%w: Sessions is required", ErrInvalidConfig)
	}
	return nil
}

// LocalSessions gives the live connection of a session attached to THIS
// node. Implemented by node/mapsvc; must be safe for concurrent use.
type LocalSessions interface {
	Conn(sessionID string) (*rpc.Conn, bool)
}

// notifier is the part of *rpc.Conn the router uses (a seam for tests).
// NotifyRaw never blocks; it fails with rpc.ErrSlowConsumer when the
// connection's send queue is full and rpc.ErrClosed once it is gone.
type notifier interface {
	NotifyRaw(method string, params json.RawMessage) error
}

// EventSink receives the ephemeral message events (never stored in the
// replicated event log). Implemented by *fanout.Hub.
type EventSink interface {
	// PublishEphemeral hands one event to the live subscriptions of this
	// node. It must not block.
	PublishEphemeral(ev registry.Event)
	// HasSubscribers reports whether any subscription could want an event,
	// so the router can skip building events nobody reads. A false
	// negative loses events, a false positive only costs work.
	HasSubscribers() bool
}

// Peers forwards a message to a recipient homed on another node of this
// system. Implemented by the cluster layer (gRPC streams between nodes).
// Submit must keep the order of calls per (nodeID, recipient), must call
// done exactly once, within a bounded time, with nil when the recipient's
// node handed the message to its connection (else why not), and must not
// block for long: it is called on the sender's request goroutine. done
// must not block either.
type Peers interface {
	Submit(ctx context.Context, nodeID string, msg *Envelope, done func(error))
}

// LocalService is an in-process service that receives the map/sends
// addressed to its id (RegisterService), such as "concord.runs" receiving
// agents' replies to run tasks. It is one recipient kind of the router: the
// node that received the send hands it over whole, whichever node leads or
// is the id's home, and the service's answer (a result, or an *rpc.Error)
// is the send's answer. HandleSend is called on the sender's request
// goroutine, in order per connection, and must be safe for concurrent use
// across connections. params are the send's raw params; it must not keep
// them after it returns.
type LocalService interface {
	HandleSend(ctx context.Context, from Sender, params json.RawMessage) (any, error)
}

// Envelope is one message travelling to one recipient on another node.
type Envelope struct {
	// Message is the full MAP Message object, shared by every recipient of
	// one send: receivers must not modify it.
	Message json.RawMessage
	// RecipientAgentID is the recipient agent ("" for a participant
	// recipient addressed by {participant} / {participants}).
	RecipientAgentID string
	// RecipientSessionID is the session holding the recipient's connection.
	RecipientSessionID string
}

// Sender identifies who calls map/send, filled by node/mapsvc from the
// session of the connection.
type Sender struct {
	SessionID       string
	ParticipantID   string
	ParticipantType string
	// AgentID is the sending agent when the session owns exactly one or the
	// params say which; else empty (the message's from is then the
	// participant id).
	AgentID string
	// SourceSystem is set only for a sender of another system whose send
	// crossed a link to a local service (DeliverService): AgentID is then
	// its remote id "<system>:agent:<id>". Local sessions never set it, so
	// a local agent registered under a remote-looking id cannot pass for
	// the remote one.
	SourceSystem string
	// SessionEpoch is the attach epoch the sending connection holds on
	// SessionID (0 when unknown): a service that proposes a write for the
	// send quotes it, so a late commit after the session moved on is
	// refused (node/runs; registry.FSMLevelModuleSessionWrites).
	SessionEpoch uint64
}

// from is the Message.from value: the agent id when there is one, so that
// the SDK's AgentConnection.reply() reaches the sender (map-protocol.md §0.1).
func (s Sender) from() string {
	if s.AgentID != "" {
		return s.AgentID
	}
	return s.ParticipantID
}
