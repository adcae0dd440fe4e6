package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Config configures a Hub. Start from DefaultConfig and set the
// collaborators; New validates it.
type Config struct {
	// NodeID is this node's id, written into the commands the hub proposes.
	NodeID string

	// Registry is the local replica: sessions and their replicated
	// subscriptions, agents (for role/scope/metadata filters) and the
	// retained event log the hub tails.
	Registry registry.Reader

	// Sessions gives the live connection of a session attached to this node.
	Sessions LocalSessions

	// Proposer proposes SUBSCRIPTION_ADD / _REMOVE / _CURSOR.
	Proposer Proposer

	// WaitApplied, optional, waits until the local replica has applied a
	// Raft index. Subscribe and Unsubscribe call it after their proposal so
	// the registry read by a later Attach or Unsubscribe on this node
	// already holds the change even when the proposal was forwarded.
	WaitApplied func(ctx context.Context, index uint64) error

	// WaitApplyBatch, optional, waits until the local replica has finished
	// applying the batch of entries it is in (raftstore's WaitApplyBatch).
	// The registry wakes the hub per event; after a wake-up the hub waits
	// for the batch's end before reading, so a batch of many entries wakes
	// it once rather than once per entry.
	WaitApplyBatch func(ctx context.Context)

	// FSMLevel, optional, returns the registry FSM level every server of
	// the system enforces (registry.FSMLevel). The hub's subscription
	// writes quote the attach epoch of the connection they are made for
	// (session_epoch) only once it reaches registry.FSMLevelSessionWrites.
	// nil counts as 0: nothing is quoted.
	FSMLevel func(ctx context.Context) int

	// Logger is the parent logger; nil discards.
	Logger *slog.Logger

	// QueueLimit bounds, per subscription, the ephemeral events (message_*)
	// waiting for a connection whose send queue is full. Registry events
	// never wait here: a slow subscription just lags behind in the
	// replicated log and catches up from there, so only ephemeral events,
	// and registry events that age out of the retained window before a
	// lagging subscription reads them, are ever dropped (and reported with
	// map/subscription.overflow). Larger absorbs longer stalls, at up to
	// QueueLimit events of memory per subscription.
	QueueLimit int
	// QueueBytes bounds the same queue in bytes (the events' encoded size),
	// with the same drop-and-report rule; one event is always accepted into
	// an empty queue. Together with rpc.Config.NotifyQueueBytes it caps what
	// a subscriber that never reads costs, whatever the event sizes.
	QueueBytes int

	// CursorFlushInterval is how often the delivery cursors that moved are
	// proposed, in one SUBSCRIPTION_CURSOR command for all of them (and at
	// Detach). Shorter means fewer duplicates replayed after a node loss,
	// at the cost of more Raft entries.
	CursorFlushInterval time.Duration

	// RetryInterval is how often a subscription whose connection refused
	// an event (rpc.ErrSlowConsumer) or which is waiting for activation is
	// retried. The connection gives no "writable" signal, so this is a poll.
	RetryInterval time.Duration

	// OverflowCloseAfter: a subscription that has been dropping events for
	// this long without catching up is closed with a final overflow notice
	// recommending "resubscribe". (It is also closed when it drops events
	// again after a warning reached it, before it caught up.)
	OverflowCloseAfter time.Duration

	// ActivationDelay holds back the first events of a new or restored
	// subscription so the map/subscribe (or map/connect) reply reaches the
	// client first: the SDK ignores events for a subscription id it has
	// not seen yet. Used when AfterReply is nil.
	ActivationDelay time.Duration

	// AfterReply, optional, runs fn once the reply to the request being
	// handled (ctx is the handler's context) has been queued on the
	// connection, and reports whether it will. When it is set and returns
	// true, activation waits for it instead of ActivationDelay.
	AfterReply func(ctx context.Context, fn func()) bool

	// ProposeTimeout bounds the cursor and removal proposals the hub makes
	// on its own (not those made for a client request, which use its ctx).
	ProposeTimeout time.Duration

	// Visible, optional, decides whether a participant (id and type) may
	// receive an event (map-protocol.md §7: events about hidden agents and
	// scopes, and message events it is not party to, are not delivered).
	// It applies to live delivery and to map/replay alike. nil delivers
	// everything the filter matches.
	Visible func(sessionID, participantID, participantType string, ev *registry.Event) bool
	// Now returns the current time; for tests. nil means time.Now.
	Now func() time.Time
}

// DefaultConfig returns production values; NodeID, Registry, Sessions and
// Proposer must be set before New.
func DefaultConfig() Config {
	return Config{
		QueueLimit:          1024,
		QueueBytes:          4 << 20,
		CursorFlushInterval: time.Second,
		RetryInterval:       20 * time.Millisecond,
		OverflowCloseAfter:  30 * time.Second,
		ActivationDelay:     25 * time.Millisecond,
		ProposeTimeout:      5 * time.Second,
	}
}

// Validate reports a missing or out-of-range field.
func (c Config) Validate() error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, msg) }
	switch {
	case c.NodeID == "":
		return bad("NodeID is required")
	case c.Registry == nil:
		return bad("Registry is required")
	case c.Sessions == nil:
		return bad("Sessions is required")
	case c.Proposer == nil:
		return bad("Proposer is required")
	case c.QueueLimit < 1:
		return bad("QueueLimit must be >= 1")
	case c.QueueBytes < 1:
		return bad("QueueBytes must be >= 1")
	case c.CursorFlushInterval <= 0:
		return bad("CursorFlushInterval must be > 0")
	case c.RetryInterval <= 0:
		return bad("RetryInterval must be > 0")
	case c.OverflowCloseAfter <= 0:
		return bad("OverflowCloseAfter must be > 0")
	case c.ActivationDelay < 0:
		return bad("ActivationDelay must be >= 0")
	case c.ProposeTimeout <= 0:
		return bad("ProposeTimeout must be > 0")
	}
	return nil
}

// LocalSessions gives the live connection of a session attached to THIS
// node. Implemented by node/mapsvc; must be safe for concurrent use.
type LocalSessions interface {
	Conn(sessionID string) (*rpc.Conn, bool)
}

// Proposer proposes one Raft command (*raftstore.Store or a forwarding
// proposer). Domain errors come back as err.
type Proposer interface {
	Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error)
}

// notifier is the part of *rpc.Conn the hub uses (a seam for tests).
// NotifyRaw never blocks and copies params.
type notifier interface {
	NotifyRaw(method string, params json.RawMessage) error
}
