package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Names this package puts on the wire.
const (
	// ServiceID is the address agents reply to (map/send to:"concord.runs")
	// and the `from` of every task message.
	ServiceID = "concord.runs"
	// ExtensionURI and ExtensionVersion are advertised in map/connect's
	// capabilities.extensions.
	ExtensionURI     = "urn:map:ext:x-concord-runs:1"
	ExtensionVersion = "1.0"
	// EventTypePrefix prefixes every run event's MAP type:
	// x-concord.run.RoundCompleted, ...
	EventTypePrefix = "x-concord.run."
	// TaskMessageType is payload.type of a task message sent to an agent.
	TaskMessageType = "x-concord.run.task"
	// TaskCancelledType is payload.type of the notice that the engine no
	// longer waits for a task the agent was sent (timed out, run cancelled
	// or over), so the agent can stop working on it.
	TaskCancelledType = "x-concord.run.task_cancelled"

	MethodStart  = "x-concord/runs/start"
	MethodGet    = "x-concord/runs/get"
	MethodList   = "x-concord/runs/list"
	MethodCancel = "x-concord/runs/cancel"
)

// EventAppender puts events into the replicated event log window.
// *registry.State implements it (AppendEvents); it is called from the
// module's Apply on raft's FSM goroutine.
type EventAppender interface {
	AppendEvents(index uint64, evs []registry.Event) []registry.Event
}

// SessionOrigins refuses a write a MAP connection made for its session
// once the session left the attach epoch the connection holds:
// *registry.State implements it (CheckOrigin, registry.ErrSessionMoved).
// The module's Apply calls it on the FSM goroutine, which applies the
// registry's entries too, so every replica reads the session at the same
// point of the log.
type SessionOrigins interface {
	CheckOrigin(sessionID string, epoch uint64) error
}

// Config configures the replicated Module.
type Config struct {
	// Events receives every run event as a MAP event (required). Every
	// replica must be given its own registry, like the module itself.
	Events EventAppender
	// Sessions checks the session an agent's reply quotes
	// (origin_session_id, origin_session_epoch; registry
	// FSMLevelModuleSessionWrites). Optional, but set on every replica or
	// none: without it the quote is not checked. node gives it the
	// registry replica that also serves as Events.
	Sessions SessionOrigins
	// OutboxLimit is how many applied inputs (count) may wait for the
	// leader's driver before the module drops them and asks the driver to
	// rescan every run instead. Higher absorbs longer driver stalls; a
	// rescan rebuilds every outstanding task, which is slower.
	OutboxLimit int
	// Logger is the parent logger; nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns production defaults; Events must be set.
func DefaultConfig() Config {
	return Config{OutboxLimit: 10_000}
}

// Validate reports a configuration error wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.Events == nil:
		return fmt.Errorf("%w: Events is required", ErrInvalidConfig)
	case c.OutboxLimit < 1:
		return fmt.Errorf("%w: OutboxLimit must be >= 1", ErrInvalidConfig)
	}
	return nil
}

// Proposer proposes one Raft command (implemented by *raftstore.Store; on a
// follower the store forwards to the leader).
type Proposer interface {
	Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error)
}

// Messenger sends a MAP message on behalf of the service: *router.Router
// satisfies it. The driver sends task messages through it. Send must not
// keep params after it returns (the driver reuses the buffer); the router
// copies what it forwards.
type Messenger interface {
	Send(ctx context.Context, from router.Sender, params json.RawMessage) (any, error)
}

// Leadership reports raft leadership changes: *raftstore.Store satisfies it.
type Leadership interface {
	SubscribeLeadership() (<-chan bool, func())
}

// AgentReader looks agents up in the local registry replica:
// *registry.State satisfies it.
type AgentReader interface {
	Agent(id string) (registry.Agent, bool)
}

// ServiceConfig configures a Service: the MAP side (extension methods,
// reply endpoint) and the leader's driver.
type ServiceConfig struct {
	// NodeID is this node's id, recorded in the inputs it proposes.
	NodeID string
	// Module is this node's replica of the runs module (required).
	Module *Module
	// Store proposes RUN_INPUT commands (required).
	Store Proposer
	// Agents is the local registry replica (required): start checks that
	// participants are registered agents, replies that the sender owns
	// the task's agent.
	Agents AgentReader
	// SystemID is this node's system (optional): a participant id
	// "<SystemID>:agent:<id>" names the local agent id.
	SystemID string
	// Remote is the federation state (optional): participants of other
	// systems ("<system>:agent:<id>") must be in the directory imported
	// from a linked system. Without it they are refused (5001).
	Remote RemoteDirectory
	// Messenger delivers task messages (required by Run).
	Messenger Messenger
	// Leadership starts the driver on leadership gained and stops it on
	// loss (required by Run).
	Leadership Leadership
	// IsLeader reports whether this node leads (required). Followers wait
	// up to LagWait for their replica to catch up before refusing a reply
	// or cancel for an unknown run or task.
	IsLeader func() bool
	// WaitApplied, optional, waits until the local replica has applied an
	// index, so a caller reads its own writes on this node.
	WaitApplied func(ctx context.Context, index uint64) error
	// FSMLevel, optional, returns the registry FSM level every server of
	// the system enforces (registry.GateLevel): a reply quotes its
	// connection's session (RunInput.origin_session_epoch) only from
	// registry.FSMLevelModuleSessionWrites on. Without it nothing is
	// quoted.
	FSMLevel func(ctx context.Context) int

	// LagWait bounds how long a follower waits for its replica to show a
	// run or task it does not know yet before refusing (90000/90002).
	// Longer tolerates more replication lag; refusals of truly unknown
	// ids take that long on followers.
	LagWait time.Duration
	// MaxPageSize caps list's limit; DefaultPageSize is used without one.
	MaxPageSize     int
	DefaultPageSize int
	// RetryMin and RetryMax bound the exponential backoff between attempts
	// to send a task that could not be delivered (agent unknown or not
	// connected) and to re-propose a timer after a transient error.
	RetryMin time.Duration
	RetryMax time.Duration
	// SendTimeout bounds one send of a task message.
	SendTimeout time.Duration
	// ProposeTimeout bounds one proposal made by the driver.
	ProposeTimeout time.Duration
	// TimerCheckInterval is the longest the driver sleeps without reading
	// the clock again, which bounds how late a timer fires after the
	// clock jumps forward (timers are absolute times from the log).
	TimerCheckInterval time.Duration
	// ResendInterval is how often the leader's driver sends a task again
	// while the engine still waits for it. A message accepted into a
	// connection that then dies (the agent reconnecting elsewhere) is lost
	// with it; re-sending is what makes such an agent still receive its
	// task. Agents see duplicates (the bridge dedupes; a second reply is
	// refused with 90002 and commits nothing). Shorter recovers sooner after
	// a cut, at the price of more duplicates. 0 disables re-sending.
	ResendInterval time.Duration

	// FinishedRetention is how long a finished run stays readable (get,
	// list, watch) before the leader forgets it; 0 keeps runs by age.
	// MaxFinishedRuns caps how many finished runs are kept (the oldest go
	// first); 0 means no cap. PruneInterval is how often the leader looks
	// for runs to forget. Without retention, run state, snapshots and
	// restore time grow with every run ever started.
	FinishedRetention time.Duration
	MaxFinishedRuns   int
	PruneInterval     time.Duration

	// Logger is the parent logger; nil discards.
	Logger *slog.Logger
	// Clock returns the current time; for tests. nil means time.Now.
	Clock func() time.Time
}

// DefaultServiceConfig returns production defaults; NodeID, Module, Store,
// Agents, IsLeader (and for Run: Messenger, Leadership) must be set.
func DefaultServiceConfig() ServiceConfig {
	return ServiceConfig{
		LagWait:         2 * time.Second,
		MaxPageSize:     1000,
		DefaultPageSize: 100,
		RetryMin:        200 * time.Millisecond,
		RetryMax:        10 * time.Second,
		SendTimeout:     10 * time.Second,
		ProposeTimeout:  10 * time.Second,

		TimerCheckInterval: time.Second,
		ResendInterval:     5 * time.Second,

		FinishedRetention: 24 * time.Hour,
		MaxFinishedRuns:   1000,
		PruneInterval:     time.Minute,
	}
}

// Validate reports a configuration error wrapping ErrInvalidConfig.
func (c ServiceConfig) Validate() error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, msg) }
	switch {
	case c.NodeID == "":
		return bad("NodeID is required")
	case c.Module == nil:
		return bad("Module is required")
	case c.Store == nil:
		return bad("Store is required")
	case c.Agents == nil:
		return bad("Agents is required")
	case c.IsLeader == nil:
		return bad("IsLeader is required")
	case c.LagWait < 0:
		return bad("LagWait must be >= 0")
	case c.MaxPageSize < 1 || c.DefaultPageSize < 1 || c.DefaultPageSize > c.MaxPageSize:
		return bad("need 1 <= DefaultPageSize <= MaxPageSize")
	case c.ResendInterval < 0:
		return bad("ResendInterval must be >= 0")
	case c.FinishedRetention < 0 || c.MaxFinishedRuns < 0 || c.PruneInterval < 0:
		return bad("FinishedRetention, MaxFinishedRuns and PruneInterval must be >= 0")
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return bad("need 0 < RetryMin <= RetryMax")
	case c.SendTimeout <= 0 || c.ProposeTimeout <= 0 || c.TimerCheckInterval <= 0:
		return bad("SendTimeout, ProposeTimeout and TimerCheckInterval must be > 0")
	}
	return nil
}
