package mapsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Proposer proposes one Raft command (implemented by *raftstore.Store, or
// by a forwarding proposer on followers).
type Proposer interface {
	Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error)
}

// Sender identifies the caller of map/send (router.Sender; an alias so
// that *router.Router satisfies Router as is).
type Sender = router.Sender

// Router is what the service needs from node/router; *router.Router
// satisfies it.
type Router interface {
	// Send waits for every recipient's outcome (in-process sends).
	Send(ctx context.Context, from Sender, params json.RawMessage) (any, error)
	// HandleSend serves a connection's map/send; it may defer the reply
	// (rpc.Defer) while another node acknowledges delivery.
	HandleSend(ctx context.Context, from Sender, params json.RawMessage) (any, error)
}

// Fanout is what the service needs from node/fanout; *fanout.Hub
// satisfies it.
type Fanout interface {
	// Subscribe and Unsubscribe get the attach epoch of the calling
	// connection, which their writes quote (registry.FSMLevelSessionWrites).
	Subscribe(ctx context.Context, sessionID string, epoch uint64, params json.RawMessage) (any, error)
	Unsubscribe(ctx context.Context, sessionID string, epoch uint64, params json.RawMessage) (any, error)
	Replay(ctx context.Context, sessionID string, params json.RawMessage) (any, error)
	Ack(ctx context.Context, sessionID string, params json.RawMessage) error
	// Attach restores a session's subscriptions on this node after
	// connect/resume, for the connection attached at epoch; Detach drops
	// them when the connection is gone.
	Attach(ctx context.Context, sessionID string, epoch uint64) error
	Detach(sessionID string)
}

// Extension is one advertised capability URI (capabilities.extensions).
type Extension struct {
	URI     string `json:"uri"`
	Version string `json:"version"`
}

// SystemInfo names the system in map/connect results.
type SystemInfo struct {
	Name    string
	Version string
}

// Config configures a Service.
type Config struct {
	// NodeID is this node's id: sessions and agents connected here get it
	// as their home node.
	NodeID string
	// System is reported as map/connect's systemInfo.
	System SystemInfo
	// SystemID is this system's id (federation): map/agents/list's
	// filter.systems selects local agents when it names it.
	SystemID string
	// RemoteAgents, optional, lists agents imported from linked systems
	// (every linked system when systems is empty), with ids in the remote
	// form "<system>:agent:<id>". map/agents/list shows them only when
	// asked (filter.systems or include.federated). nil: none.
	RemoteAgents func(systems []string) []registry.Agent
	// Sessions is the table of sessions attached to this node. Build it
	// with NewSessions first when node/router and node/fanout need it
	// before the Service exists; nil makes New create one.
	Sessions *Sessions

	// Store proposes commands (required).
	Store Proposer
	// Registry is the local replica of the registry module (required).
	Registry *registry.State
	// LinearizableRead, optional, makes a read linearizable (leader
	// check/ReadIndex). Reads call it only when the request asks for it
	// with _meta.consistency = "linearizable"; nil makes such requests
	// fail with a retryable 4000.
	LinearizableRead func(ctx context.Context) error
	// Barrier, optional, returns once the local replica holds everything
	// committed before the call (node: a ReadIndex on the leader, a NOOP
	// through the leader on a follower). map/connect calls it when the
	// session to resume is unknown here, so a lagging node does not open a
	// fresh session in place of one it has not applied yet.
	Barrier func(ctx context.Context) error
	// WaitApplied, optional, waits until the local replica has applied a
	// Raft index. When set, a write made outside a request waits for its
	// own index, and every request first waits for the indexes of the
	// writes this node answered (fence.go), so a participant reads its
	// writes on this node even when the proposal was forwarded to the
	// leader.
	WaitApplied func(ctx context.Context, index uint64) error
	// WaitFence, optional, is WaitApplied for the read-your-writes fence
	// (fence.go): a wait that also asks the leader to send this node the
	// commit index now (raftstore's WaitAppliedSoon). Nil: WaitApplied.
	WaitFence func(ctx context.Context, index uint64) error
	// WaitApplyBatch, optional, waits until the local replica has finished
	// applying the batch of entries it is in (raftstore's WaitApplyBatch).
	// Run wakes on every registry event; it waits for the batch's end
	// before looking, so a batch of many entries wakes it once.
	WaitApplyBatch func(ctx context.Context)
	// AppliedIndex, optional, returns the local replica's applied Raft
	// index (raftstore's AppliedIndex). With it, a request whose fence is
	// already applied (nearly every one) skips the bounded wait and the
	// timer context it takes.
	AppliedIndex func() uint64
	// IsLeader reports whether the local store leads; Run proposes expiries
	// only then (required by Run).
	IsLeader func() bool
	// FSMLevel, optional, returns the registry FSM level every server of
	// the system enforces (see registry.FSMLevel): a command field an
	// older FSM would ignore is proposed only once it reaches the field's
	// level, so every replica applies the log alike. Nil counts as 0
	// (nothing level-gated is proposed).
	FSMLevel func(ctx context.Context) int
	// NodeAlive, optional, reports whether a node is a live member. When
	// set, the leader detaches sessions still marked connected to a node
	// that is gone, so their disconnect policies apply.
	NodeAlive func(nodeID string) bool

	// Router handles map/send and spawn initial messages; nil makes them
	// fail (-32601 for map/send, 3004 for spawn with initialMessage).
	Router Router
	// Fanout handles subscriptions; nil leaves those methods unmounted.
	Fanout Fanout

	// Authenticator checks map/connect credentials and decides what each
	// principal may be (node/acl). nil accepts anonymous participants of
	// every type: for in-process embedding and tests only; the node always
	// sets one.
	Authenticator Authenticator
	// ParticipantPermissions, optional, holds the capability ceilings set
	// with map/permissions/update (node/acl); nil leaves that method
	// unmounted (-32601).
	ParticipantPermissions ParticipantPermissions

	// AuthExpiryWarning is how long before its credential expires a
	// session is sent map/auth/expiring (once per expiry).
	AuthExpiryWarning time.Duration
	// AuthRevokeGrace is how long a session whose credential expired or
	// was revoked stays open after map/auth/revoked (gracePeriodMs) before
	// the connection is closed; meanwhile only refresh and disconnect work.
	AuthRevokeGrace time.Duration

	// DetachedSessionTTL is how long a session whose connection was lost
	// (or that called map/disconnect) stays resumable before it is
	// forgotten with its subscriptions. Longer keeps more state.
	DetachedSessionTTL time.Duration
	// OrphanGrace is how long a session the registry shows connected and
	// homed on this node, with no local connection holding it (a restored
	// snapshot, or this node's previous run), must stay so before this
	// node detaches it (Run's periodic pass; at least two passes). The
	// node sets it to the cluster's session detach grace.
	OrphanGrace time.Duration
	// DefaultDisconnectPolicy applies when map/connect has none.
	DefaultDisconnectPolicy registry.DisconnectPolicy
	// ExpiryInterval is how often Run looks for due expiries and moved
	// sessions (it also looks on registry events that re-attach or detach
	// a session): the most a deadline can be late.
	ExpiryInterval time.Duration
	// CloseTimeout bounds the SESSION_DETACH proposed when a connection
	// closes.
	CloseTimeout time.Duration
	// MaxPageSize caps limit on paged lists (agents/list, scopes/members).
	MaxPageSize int
	// MaxSessionSubscriptions caps the subscriptions one session holds, so
	// a participant without a client-permission limit (an anonymous one)
	// cannot grow the replicated session and the fan-out without bound:
	// map/subscribe past it gets 4002. 0 means no cap.
	MaxSessionSubscriptions int
	// AnonymousSessionRate bounds the new sessions anonymous participants
	// (auth method none) open on this node from one client address (IPv6:
	// one /64), per second, with bursts of AnonymousSessionBurst: each is
	// a replicated write kept for DetachedSessionTTL after it ends, so a
	// connect/disconnect loop must not grow replicated state without
	// bound. map/connect past it gets a retryable 4001 with retryAfterMs
	// and creates nothing. Authenticated participants, resumes and local
	// connections (stdio, in-process) are not counted. 0 means no limit.
	AnonymousSessionRate  float64
	AnonymousSessionBurst int
	// Extensions are advertised in capabilities.extensions (advertise-only).
	Extensions []Extension
	// Gateway, optional, serves map/federation/connect and
	// map/federation/route for gateway (and system) participants with the
	// federation.canFederate capability; without it they are -32601.
	Gateway Gateway
	// ExtensionMethods, optional, mounts extra methods by name (for
	// example "x-concord/runs/start") served by other packages. A name
	// that is a core method is a configuration error (New fails).
	ExtensionMethods map[string]MethodFunc

	// Logger is the parent logger; nil discards.
	Logger *slog.Logger
	// Clock returns the current time; for tests. nil means time.Now.
	Clock func() time.Time
}

// DefaultConfig returns production defaults; NodeID, Store, Registry and
// IsLeader must be set.
func DefaultConfig() Config {
	return Config{
		System:             SystemInfo{Name: "concord", Version: "dev"},
		DetachedSessionTTL: time.Hour,
		DefaultDisconnectPolicy: registry.DisconnectPolicy{
			AgentBehavior: registry.BehaviorGracePeriod,
			GracePeriodMs: 60_000,
		},
		OrphanGrace:       3 * time.Second,
		ExpiryInterval:    time.Second,
		CloseTimeout:      5 * time.Second,
		AuthExpiryWarning: time.Minute,
		AuthRevokeGrace:   5 * time.Second,
		MaxPageSize:       1000,

		MaxSessionSubscriptions: 1000,
		AnonymousSessionRate:    20,
		AnonymousSessionBurst:   200,
	}
}

// Validate reports a configuration error wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.NodeID == "":
		return bad("NodeID is required")
	case c.Store == nil:
		return bad("Store is required")
	case c.Registry == nil:
		return bad("Registry is required")
	case c.IsLeader == nil:
		return bad("IsLeader is required")
	case c.DetachedSessionTTL <= 0:
		return bad("DetachedSessionTTL must be > 0")
	case !registry.ValidBehavior(c.DefaultDisconnectPolicy.AgentBehavior):
		return bad("DefaultDisconnectPolicy.AgentBehavior %q unknown", c.DefaultDisconnectPolicy.AgentBehavior)
	case c.DefaultDisconnectPolicy.GracePeriodMs < 0:
		return bad("DefaultDisconnectPolicy.GracePeriodMs must be >= 0")
	case c.ExpiryInterval <= 0:
		return bad("ExpiryInterval must be > 0")
	case c.OrphanGrace < 0:
		return bad("OrphanGrace must be >= 0")
	case c.CloseTimeout <= 0:
		return bad("CloseTimeout must be > 0")
	case c.AuthExpiryWarning < 0 || c.AuthRevokeGrace < 0:
		return bad("AuthExpiryWarning and AuthRevokeGrace must be >= 0")
	case c.MaxPageSize < 1:
		return bad("MaxPageSize must be >= 1")
	case c.MaxSessionSubscriptions < 0:
		return bad("MaxSessionSubscriptions must be >= 0")
	case c.AnonymousSessionRate < 0 || math.IsNaN(c.AnonymousSessionRate) || math.IsInf(c.AnonymousSessionRate, 0):
		return bad("AnonymousSessionRate must be a finite number >= 0")
	case c.AnonymousSessionRate > 0 && c.AnonymousSessionBurst < 1:
		return bad("AnonymousSessionBurst must be >= 1 when AnonymousSessionRate is set")
	}
	return nil
}
