package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Config configures a Manager. Start from DefaultConfig.
type Config struct {
	// SystemID and NodeID identify this node.
	SystemID, NodeID string
	// Plaintext lets links run without TLS (--dev and tests only). Without
	// it a link needs Credentials.
	Plaintext bool
	// Credentials returns the transport credentials to dial a linked
	// system with: this system's server certificate, and the peer's CA
	// from the link (which must present a certificate naming its system
	// id). Provided by node from its TLS configuration; nil refuses links
	// unless Plaintext.
	Credentials func(link *concordv1.FedLink) (credentials.TransportCredentials, error)
	// CAPEM is this system's CA certificate, packed into tokens.
	CAPEM []byte
	// TokenTTL is how long a peering token stays redeemable by default.
	TokenTTL time.Duration
	// DirectorySync is how often the leader asks each peer for directory
	// changes (a delta; a full set after a gap).
	DirectorySync time.Duration
	// Ping is how often a stream measures its RTT.
	Ping time.Duration
	// BackoffMin and BackoffMax bound the jittered reconnect delay.
	BackoffMin, BackoffMax time.Duration
	// CallTimeout bounds one handshake RPC or stream open.
	CallTimeout time.Duration
	// AckTimeout bounds how long a sent message waits for its ack before
	// its sender hears 5000 (outcome unknown).
	AckTimeout time.Duration
	// GuaranteedWait bounds how long a guaranteed send waits for the
	// peer's answer (while this node's stream is up) before it answers
	// "queued": the message is in the Raft log by then.
	GuaranteedWait time.Duration
	// RelayGuaranteed lets the leader relay the guaranteed outbox through
	// another node while its own stream to the peer is down (relay.go), so
	// guaranteed messages do not wait for that one stream. On by default;
	// off, they wait ("queued") until the leader's stream returns or
	// leadership moves.
	RelayGuaranteed bool
	// DirectoryChunkBytes bounds one chunk of a directory update, so one
	// Raft entry: at most 512 KiB.
	DirectoryChunkBytes int
	// UnlinkRetry is how often the leader retries telling a peer of an
	// unlink it has not confirmed.
	UnlinkRetry time.Duration
	// MaxEnvelopeBytes bounds one message's payload+meta across a link.
	MaxEnvelopeBytes int
	// DirectStreams sends a best-effort message for a remote agent on a
	// stream to the peer server that holds the agent (direct.go), when the
	// peer's directory says which one, instead of letting the main
	// stream's server relay it there (~0.17 ms a leg). Off: every message
	// takes the main stream.
	DirectStreams bool
	// DirectIdle is how long a direct stream stays open with nothing to
	// send before it closes (the next message for its server opens it
	// again, taking the main stream meanwhile).
	DirectIdle time.Duration
	// Dialer, for tests / fault injection: dials peers' gRPC addresses.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Logger is the parent logger; nil discards.
	Logger *slog.Logger
	// Now returns the current time; for tests. nil means time.Now.
	Now func() time.Time
}

// DefaultConfig returns production timings.
func DefaultConfig() Config {
	return Config{
		TokenTTL: time.Hour, DirectorySync: 2 * time.Second, Ping: 5 * time.Second,
		BackoffMin: 200 * time.Millisecond, BackoffMax: 10 * time.Second,
		CallTimeout: 10 * time.Second, AckTimeout: 15 * time.Second, MaxEnvelopeBytes: 1 << 20,
		GuaranteedWait: 2 * time.Second, RelayGuaranteed: true, DirectoryChunkBytes: 256 << 10, UnlinkRetry: 5 * time.Second,
		DirectStreams: true, DirectIdle: time.Minute,
	}
}

// Validate reports a missing or out-of-range field.
func (c Config) Validate() error {
	switch {
	case !validSystemID(c.SystemID):
		return fmt.Errorf("%w: SystemID %q", ErrInvalidConfig, c.SystemID)
	case c.NodeID == "":
		return fmt.Errorf("%w: NodeID is required", ErrInvalidConfig)
	case c.TokenTTL <= 0 || c.DirectorySync <= 0 || c.Ping <= 0 || c.CallTimeout <= 0 || c.AckTimeout <= 0 ||
		c.GuaranteedWait <= 0 || c.UnlinkRetry <= 0 || (c.DirectStreams && c.DirectIdle <= 0):
		return fmt.Errorf("%w: timings must be > 0", ErrInvalidConfig)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("%w: backoff bounds", ErrInvalidConfig)
	case c.DirectoryChunkBytes < 1<<10 || c.DirectoryChunkBytes > MaxDirectoryChunkBytes:
		return fmt.Errorf("%w: DirectoryChunkBytes must be in 1 KiB..512 KiB (one Raft entry)", ErrInvalidConfig)
	case c.MaxEnvelopeBytes <= 0 || c.MaxEnvelopeBytes > 8<<20:
		return fmt.Errorf("%w: MaxEnvelopeBytes must be in 1..8 MiB (a stream message holds at most 16 MiB)", ErrInvalidConfig)
	}
	return nil
}

// MaxDirectoryChunkBytes bounds Config.DirectoryChunkBytes: no directory
// Raft entry is larger.
const MaxDirectoryChunkBytes = 512 << 10

// Proposer proposes a command to this system's Raft log from any node
// (raftstore.Store.Apply, which forwards from followers).
type Proposer interface {
	Apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error)
}

// LocalDirectory is this system's agents, as federation exports them.
type LocalDirectory interface {
	// Agents returns every local agent (the export policy filters).
	Agents() []*concordv1.FedRemoteAgent
	// Agent returns one local agent.
	Agent(id string) (*concordv1.FedRemoteAgent, bool)
	// ScopeMembers returns a scope's member agent ids (ok=false: unknown).
	ScopeMembers(id string) ([]string, bool)
	// Version is a number that grows with every change of the directory
	// (the Raft applied index), the same sequence on every node.
	Version() uint64
}

// Deliverer delivers a message that crossed a link to a local agent,
// wherever in this system its connection is. done is called once, with
// nil when the agent's connection took it.
type Deliverer interface {
	DeliverAgent(ctx context.Context, agentID string, msg json.RawMessage, done func(error))
}

// ServiceDeliverer hands a message that crossed a link to an in-process
// service of this system (such as "concord.runs", which takes agents'
// answers to run tasks): services are addressed like agents,
// "<system>:agent:<service id>", but are not in the directory and no
// export policy applies to them; the service decides who may use it.
type ServiceDeliverer interface {
	// IsService reports whether id names a service of this system.
	IsService(id string) bool
	// DeliverService calls service id with map/send params from the remote
	// sender from ("<system>:agent:<id>") and returns its refusal, if any,
	// as a *CodeError. It may block until the service has answered.
	DeliverService(ctx context.Context, id, from string, params json.RawMessage) *CodeError
}

// EventSink receives federation_connected / federation_disconnected.
type EventSink interface {
	FederationEvent(kind, peerSystem string, data map[string]any)
}

// Deps are the Manager's collaborators, passed in by node.
type Deps struct {
	State    *State
	Store    Proposer
	IsLeader func() bool
	Local    LocalDirectory
	Deliver  Deliverer
	// Servers returns this system's live servers' gRPC addresses.
	Servers func() []string
	// Events is optional.
	Events EventSink
	// Services, optional, receives envelopes addressed to a service id
	// (ServiceDeliverer); without it such an id is an unknown agent.
	Services ServiceDeliverer
	// Sessions, optional, delivers to MAP gateway sessions: without it
	// messages for systems served by SDK gateways answer 5001.
	Sessions SessionDeliverer
	// Barrier, optional, returns once this node has applied everything
	// committed before the call. A message for a local agent or scope
	// this node does not know yet waits for it before the answer is
	// 2001/5003: the sender's directory may be ahead of this replica.
	Barrier func(ctx context.Context) error
	// Nodes, optional, returns the ids of this system's live server nodes:
	// the leader chooses each map link's holder among them. nil: map
	// links get no holder from this node.
	Nodes func() []string
	// NodeConn, optional, returns a connection to another node of this
	// system: messages for a map link go to its holder. nil: they wait.
	NodeConn NodeConnFunc
	// MAPDial, optional, opens connections to foreign MAP servers (links
	// of kind map). nil: this node never holds a map link.
	MAPDial MAPDialer
	// VerifyLeader, optional, confirms with a quorum that this node still
	// leads (the outbox drainer checks before sending).
	VerifyLeader func(ctx context.Context) error
	// SessionLive, optional, reports whether a MAP session may still take
	// messages (not closed, not expired), and its attach epoch (0 when it
	// no longer exists): the leader drops the gateway bindings of sessions
	// that ended. nil: bindings stay until replaced.
	SessionLive func(sessionID string) (epoch uint64, live bool)
	// QuoteSessionEpochs, optional, reports whether every server enforces
	// the session epochs gateway binds and unbinds quote (node: registry
	// FSMLevelModuleSessionWrites); State must then have WithSessions on
	// every replica. nil: nothing is quoted.
	QuoteSessionEpochs func(ctx context.Context) bool
}

func (d Deps) validate() error {
	if d.State == nil || d.Store == nil || d.IsLeader == nil || d.Local == nil || d.Deliver == nil || d.Servers == nil {
		return fmt.Errorf("%w: State, Store, IsLeader, Local, Deliver and Servers are required", ErrInvalidConfig)
	}
	return nil
}
