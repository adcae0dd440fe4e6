package cluster

import (
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Config holds the settings shared by every part of the package (Forwarder,
// PeerStreams, Server, Reconciler, Directory). Start from DefaultConfig and
// override; zero values are not replaced by defaults (except Logger).
type Config struct {
	// NodeID is this node's id (its Raft server id and memberlist name).
	// Required.
	NodeID string

	// Logger is the parent logger; each part derives a component logger
	// from it. nil discards.
	Logger *slog.Logger

	// ---- gRPC transport ----

	// DialTimeout bounds how long a Forward waits for a connection to the
	// leader to become ready, and how long the relay waits for a peer's
	// stream to open, per attempt. Short detects a dead peer sooner; too
	// short fails under load.
	DialTimeout time.Duration

	// KeepaliveTime is how long a connection may be idle before the client
	// pings the peer; with KeepaliveTimeout it detects a peer that vanished
	// without closing TCP (power loss, partition), which would otherwise
	// stall a relay stream until the OS gives up (minutes).
	KeepaliveTime time.Duration

	// KeepaliveTimeout is how long a ping may go unanswered before the
	// connection is closed.
	KeepaliveTimeout time.Duration

	// HandshakeTimeout bounds how long an inbound connection to the gRPC
	// port may take to finish its TLS handshake and HTTP/2 preface, so a
	// caller that sends half a handshake and goes silent does not hold a
	// socket and goroutine for gRPC's default of 120 s. 0 keeps that
	// default.
	HandshakeTimeout time.Duration

	// MaxMessageSize is the largest gRPC message (bytes) sent or received:
	// a forwarded command or one relay batch. It must exceed
	// 2*RelayMaxBatchBytes because a batch is closed only after the envelope
	// that crosses RelayMaxBatchBytes.
	MaxMessageSize int

	// DialOptions are appended to the client options of every peer
	// connection (interceptors, fault injection; for tests).
	DialOptions []grpc.DialOption

	// PeerCredentials returns the transport credentials for dialing node
	// id: mutual TLS that verifies the peer's certificate names that node
	// of this system (tlsconf). nil dials plaintext, which node allows only
	// with --insecure or --dev.
	PeerCredentials func(nodeID string) credentials.TransportCredentials

	// ServerOptions are appended to the gRPC server's options.
	ServerOptions []grpc.ServerOption

	// ---- write forwarding ----

	// ForwardRetryTimeout bounds how long Forward keeps retrying while
	// there is no leader, the leader moves, or it cannot be reached, before
	// it gives up with an error matching ErrNoLeader. It is capped by the
	// caller's context. About two election timeouts lets one election
	// finish.
	ForwardRetryTimeout time.Duration
	// ForwardAttemptTimeout bounds one Forward call to the leader. A leader
	// cut off by a partition never answers; without this bound a follower's
	// write would hang until the caller's own deadline. An attempt that
	// runs out fails with "outcome unknown" (raftstore.ErrLeadershipLost:
	// the leader may have committed it) and is not retried. It must exceed
	// the slowest healthy commit (fsync + replication) with room to spare.
	ForwardAttemptTimeout time.Duration

	// ForwardBackoff is the first pause between Forward retries; it doubles
	// per attempt up to ForwardMaxBackoff.
	ForwardBackoff time.Duration

	// ForwardMaxBackoff caps the pause between Forward retries.
	ForwardMaxBackoff time.Duration

	// ForwardUnaryOnly sends every forwarded write as its own
	// Cluster.Forward call instead of on the ForwardStream to the leader
	// (the behaviour of older versions; for comparison and as an escape
	// hatch).
	ForwardUnaryOnly bool

	// ForwardStreamQueue is how many forwarded writes (count) one stream
	// to the leader may hold, queued or waiting for the leader's answer;
	// further writers wait (up to their deadline) for room. It bounds the
	// follower's memory per leader and what a broken stream fails at once.
	ForwardStreamQueue int

	// ForwardStreamMaxBatch is the most commands (count) per ForwardBatch:
	// the sender takes whatever is queued when it wakes, up to this many.
	ForwardStreamMaxBatch int

	// ForwardStreamMaxBatchBytes closes a ForwardBatch before its command
	// bytes would pass it (a batch holds at least one command). At most
	// MaxMessageSize/2, leaving room for a command near the size limit.
	ForwardStreamMaxBatchBytes int

	// ForwardStreamMaxInFlight is how many commands (count) of one
	// follower's stream the leader proposes at a time; it stops reading
	// that stream (HTTP/2 flow control then holds the follower) until
	// some complete.
	ForwardStreamMaxInFlight int

	// ForwardStreamIdleTimeout is how long a stream to a node with nothing
	// queued or in flight stays open before its goroutines close it (the
	// next write opens a new one): a node that stopped leading does not
	// keep a stream and two goroutines forever.
	ForwardStreamIdleTimeout time.Duration

	// ---- message relay ----

	// RelayQueueSize is how many envelopes (count) may wait per peer before
	// PeerStreams.Send blocks (up to its deadline). It absorbs bursts while a
	// stream reconnects; memory is bounded by it times the message size.
	RelayQueueSize int

	// RelayMaxBatch is the most envelopes (count) per RelayBatch. Batching
	// amortises the per-message cost of a gRPC stream write (64 per batch
	// took a raw stream from 0.56M to 3.4M msgs/s on the project machine).
	RelayMaxBatch int

	// RelayMaxBatchBytes closes a batch once its message bytes reach it.
	RelayMaxBatchBytes int

	// RelayMaxInFlight is the most envelopes (count) sent to one peer and
	// not yet acknowledged; the sender stops sending at that point. It
	// bounds the memory held for pending acks and the loss when a stream
	// breaks.
	RelayMaxInFlight int

	// RelayDeliveryTimeout bounds how long a relayed message may take from
	// PeerStreams.Send to the peer's ack (unless the caller's context ends
	// sooner). A message not acknowledged by then fails, which is how a
	// dead or unreachable peer turns into DELIVERY_FAILED. A stream whose
	// oldest unacknowledged envelope is older than this is torn down.
	RelayDeliveryTimeout time.Duration

	// RelayReconnectBackoff is the first pause before re-opening a failed
	// stream; it doubles per failure up to RelayReconnectMaxBackoff.
	RelayReconnectBackoff time.Duration

	// RelayReconnectMaxBackoff caps the reconnect pause.
	RelayReconnectMaxBackoff time.Duration

	// RelayIdleTimeout is how long a per-peer sender goroutine with nothing
	// queued or in flight lives before it closes its stream and exits (a new
	// one starts on the next message). It keeps peers that are no longer
	// addressed from holding a goroutine and a stream forever.
	RelayIdleTimeout time.Duration

	// ---- reconciler ----

	// ReconcileInterval is how often the reconciler re-checks membership
	// against the Raft configuration and the registry, besides reacting to
	// membership and leadership changes. It bounds how late the dead-server
	// cleanup runs after its delay.
	ReconcileInterval time.Duration

	// ReconcileTimeout bounds one reconcile pass (its Raft configuration
	// changes and SESSION_DETACH proposals).
	ReconcileTimeout time.Duration

	// DeadServerCleanupDelay is how long a server must have been dead (or
	// unknown to gossip) before the leader removes it from the Raft
	// configuration. Long enough to ride out a reboot or a short partition
	// (removing and re-adding a voter costs a snapshot transfer); short
	// enough that a replaced server does not linger as a voter. It must be
	// below membership's DeadMemberRetention.
	DeadServerCleanupDelay time.Duration

	// MinQuorum is the smallest number of voters the reconciler leaves in
	// the configuration when it removes dead servers: a dead server is not
	// removed if that would leave fewer voters. With the default 3, a
	// three-server cluster keeps a dead server (it still has a quorum of
	// two) until a replacement joins and makes four. Servers that left
	// gracefully are removed regardless (the operator asked for it).
	MinQuorum int

	// RaftVoters is the number of Raft voters the leader keeps (3 or 5;
	// the same on every server): every further server joins as a
	// non-voter, which replicates and serves everything but does not
	// vote, so adding servers for connections does not slow commits. When
	// a voter fails or leaves, the healthiest stable non-voter is
	// promoted; when it comes back, extras are demoted (never below
	// MinQuorum). 0 makes every server a voter (the behaviour of older
	// versions).
	RaftVoters int

	// ServerStabilizationTime is how long a non-voter must have been
	// healthy before the autopilot promotes it: a server that just
	// joined, or flaps, does not get a vote.
	ServerStabilizationTime time.Duration

	// LastContactThreshold is how long a server may go without hearing
	// from the leader and still count as healthy.
	LastContactThreshold time.Duration

	// MaxTrailingLogs is how many log entries (count) a server may trail
	// the leader's log by and still count as healthy.
	MaxTrailingLogs uint64

	// DetachedSessionTTL is the TTL the reconciler gives sessions it
	// detaches because their node died or left; set it to the MAP
	// service's DetachedSessionTTL so such sessions behave like those
	// whose connection dropped.
	DetachedSessionTTL time.Duration

	// SessionDetachGrace is how long a node must have been continuously
	// failed (dead in gossip, same boot) before the leader detaches its
	// sessions. Under CPU load gossip declares a live node dead for a
	// moment; without a grace every such false failure costs a detach and
	// a reconnect/resume for each of the node's clients (and, with the
	// default disconnect policy, their agents' re-registration). Keep it
	// far below the MAP and run timeouts: a real death's sessions wait
	// this much longer to move. A node that left is not waited for, and
	// one unknown to gossip waits DeadServerCleanupDelay. 0 detaches at
	// once.
	SessionDetachGrace time.Duration

	// Now returns the current time; for tests. nil means time.Now.
	Now func() time.Time
}

// DefaultRaftVoters is DefaultConfig's RaftVoters: five voters survive two
// failures, and a system of up to five servers behaves as before
// non-voters existed (every server votes).
const DefaultRaftVoters = 5

// DefaultSessionDetachGrace is DefaultConfig's SessionDetachGrace: a
// false failure on a loaded host is refuted within a second or two of
// gossip (the node hears it was declared dead and rejoins), while a real
// death's sessions still move seconds after it is declared, far inside
// the MAP session TTL and the runs' task timeouts.
const DefaultSessionDetachGrace = 3 * time.Second

// DefaultConfig returns production defaults. NodeID must still be set.
func DefaultConfig() Config {
	return Config{
		DialTimeout:              2 * time.Second,
		KeepaliveTime:            10 * time.Second,
		KeepaliveTimeout:         5 * time.Second,
		HandshakeTimeout:         10 * time.Second,
		MaxMessageSize:           16 << 20,
		ForwardRetryTimeout:      3 * time.Second,
		ForwardAttemptTimeout:    2 * time.Second,
		ForwardBackoff:           20 * time.Millisecond,
		ForwardMaxBackoff:        500 * time.Millisecond,
		RelayQueueSize:           8192,
		RelayMaxBatch:            128,
		RelayMaxBatchBytes:       1 << 20,
		RelayMaxInFlight:         8192,
		RelayDeliveryTimeout:     5 * time.Second,
		RelayReconnectBackoff:    50 * time.Millisecond,
		RelayReconnectMaxBackoff: 2 * time.Second,
		RelayIdleTimeout:         5 * time.Minute,
		ReconcileInterval:        5 * time.Second,
		ReconcileTimeout:         10 * time.Second,
		DeadServerCleanupDelay:   30 * time.Second,
		MinQuorum:                3,
		RaftVoters:               DefaultRaftVoters,
		ServerStabilizationTime:  10 * time.Second,
		LastContactThreshold:     time.Second,
		MaxTrailingLogs:          1000,
		DetachedSessionTTL:       time.Hour,
		SessionDetachGrace:       DefaultSessionDetachGrace,
		// Forwarding on one stream per leader (fwdstream.go).
		ForwardStreamQueue:         4096,
		ForwardStreamMaxBatch:      256,
		ForwardStreamMaxBatchBytes: 1 << 20,
		ForwardStreamMaxInFlight:   4096,
		ForwardStreamIdleTimeout:   time.Minute,
	}
}

// Validate reports the first problem with c, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"DialTimeout", c.DialTimeout}, {"KeepaliveTime", c.KeepaliveTime},
		{"KeepaliveTimeout", c.KeepaliveTimeout}, {"ForwardRetryTimeout", c.ForwardRetryTimeout}, {"ForwardAttemptTimeout", c.ForwardAttemptTimeout},
		{"ForwardBackoff", c.ForwardBackoff}, {"ForwardMaxBackoff", c.ForwardMaxBackoff},
		{"ForwardStreamIdleTimeout", c.ForwardStreamIdleTimeout},
		{"RelayDeliveryTimeout", c.RelayDeliveryTimeout}, {"RelayReconnectBackoff", c.RelayReconnectBackoff},
		{"RelayReconnectMaxBackoff", c.RelayReconnectMaxBackoff}, {"RelayIdleTimeout", c.RelayIdleTimeout},
		{"ReconcileInterval", c.ReconcileInterval}, {"ReconcileTimeout", c.ReconcileTimeout},
		{"DeadServerCleanupDelay", c.DeadServerCleanupDelay}, {"DetachedSessionTTL", c.DetachedSessionTTL},
		{"ServerStabilizationTime", c.ServerStabilizationTime}, {"LastContactThreshold", c.LastContactThreshold},
	}
	switch {
	case c.NodeID == "":
		return bad("NodeID is required")
	case c.HandshakeTimeout < 0:
		return bad("HandshakeTimeout must be >= 0")
	case c.MaxMessageSize < 2*c.RelayMaxBatchBytes:
		return bad("MaxMessageSize %d must be >= 2*RelayMaxBatchBytes (%d)", c.MaxMessageSize, 2*c.RelayMaxBatchBytes)
	case c.RelayQueueSize < 1, c.RelayMaxBatch < 1, c.RelayMaxBatchBytes < 1, c.RelayMaxInFlight < 1:
		return bad("RelayQueueSize, RelayMaxBatch, RelayMaxBatchBytes and RelayMaxInFlight must be >= 1")
	case c.RelayMaxInFlight < c.RelayMaxBatch:
		return bad("RelayMaxInFlight %d must be >= RelayMaxBatch %d", c.RelayMaxInFlight, c.RelayMaxBatch)
	case c.ForwardStreamQueue < 1, c.ForwardStreamMaxBatch < 1, c.ForwardStreamMaxBatchBytes < 1, c.ForwardStreamMaxInFlight < 1:
		return bad("ForwardStreamQueue, ForwardStreamMaxBatch, ForwardStreamMaxBatchBytes and ForwardStreamMaxInFlight must be >= 1")
	case c.ForwardStreamMaxBatchBytes > c.MaxMessageSize/2:
		return bad("ForwardStreamMaxBatchBytes %d must be <= MaxMessageSize/2 (%d)", c.ForwardStreamMaxBatchBytes, c.MaxMessageSize/2)
	case c.ForwardMaxBackoff < c.ForwardBackoff:
		return bad("ForwardMaxBackoff must be >= ForwardBackoff")
	case c.RelayReconnectMaxBackoff < c.RelayReconnectBackoff:
		return bad("RelayReconnectMaxBackoff must be >= RelayReconnectBackoff")
	case c.MinQuorum < 1:
		return bad("MinQuorum must be >= 1, got %d", c.MinQuorum)
	case c.SessionDetachGrace < 0:
		return bad("SessionDetachGrace must be >= 0, got %s", c.SessionDetachGrace)
	}
	if err := c.ValidatePolicy(); err != nil {
		return err
	}
	for _, d := range durations {
		if d.d <= 0 {
			return bad("%s must be > 0, got %s", d.name, d.d)
		}
	}
	return nil
}

// ValidatePolicy checks the voter policy alone (node checks it before the
// node id is filled in): RaftVoters is 3 or 5 (or 0) and MinQuorum is
// between 1 and RaftVoters.
func (c Config) ValidatePolicy() error {
	switch {
	case c.MinQuorum < 1:
		return fmt.Errorf("%w: MinQuorum must be >= 1, got %d", ErrInvalidConfig, c.MinQuorum)
	case c.RaftVoters != 0 && c.RaftVoters != 3 && c.RaftVoters != 5:
		return fmt.Errorf("%w: RaftVoters must be 3 or 5 (or 0: every server votes), got %d", ErrInvalidConfig, c.RaftVoters)
	case c.RaftVoters != 0 && c.MinQuorum > c.RaftVoters:
		return fmt.Errorf("%w: MinQuorum %d must not exceed RaftVoters %d", ErrInvalidConfig, c.MinQuorum, c.RaftVoters)
	}
	return nil
}

// logger returns the component logger for part.
func (c Config) logger(part string) *slog.Logger {
	l := c.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return l.With("component", part, "node_id", c.NodeID)
}

// now returns c.Now or time.Now.
func (c Config) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
