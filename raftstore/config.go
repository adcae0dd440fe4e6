package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Config configures a Store. Start from DefaultConfig and override; zero
// values are not replaced by defaults (except Logger).
type Config struct {
	// NodeID is this server's stable raft ID. It must be unique in the
	// cluster and never change for a given DataDir. Required.
	NodeID string

	// DataDir holds the raft log (raft-log/), the stable store (raft.db) and the
	// snapshots directory. One Store per directory. Required.
	DataDir string

	// BindAddr is the host:port the raft TCP transport listens on. Port 0
	// picks a free port (read it back with Store.Addr). Ignored when
	// StreamLayer is set.
	BindAddr string

	// AdvertiseAddr is the host:port other servers dial to reach this one.
	// Empty means the address actually bound, which must then not be a
	// wildcard (0.0.0.0 or ::). Ignored when StreamLayer is set.
	AdvertiseAddr string

	// Modules are the state modules the FSM routes commands to, in the
	// order they are written to snapshots. Each command type may be
	// claimed by one module only.
	Modules []Module

	// Logger receives the Store's logs and raft's (through an hclog
	// bridge). Nil discards them.
	Logger *slog.Logger

	// HeartbeatTimeout is how long a follower waits without contact from
	// the leader before it starts an election. Lower detects a dead leader
	// sooner but risks elections under load or GC pauses. The default,
	// 500 ms (half of hashicorp/raft's), keeps leader failover around a
	// second on a LAN; raise it for WAN links or overloaded hosts. Set the
	// four timeouts together with SetRaftMultiplier (timing.go).
	HeartbeatTimeout time.Duration

	// ElectionTimeout is how long a candidate waits for votes before it
	// starts a new election. Must be >= HeartbeatTimeout.
	ElectionTimeout time.Duration

	// LeaderLeaseTimeout is how long a leader keeps leading without
	// hearing from a quorum; after it, the leader steps down (and
	// in-flight commands fail with ErrLeadershipLost). Must be <=
	// HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration

	// CommitTimeout is the longest a leader waits before sending an
	// AppendEntries even when there is nothing new, which bounds how late
	// followers learn the commit index (and thus apply) when idle. A
	// forwarded write does not wait for it: the leader nudges followers
	// with a NOOP once it commits one (nudge.go).
	CommitTimeout time.Duration

	// SnapshotInterval is how often raft checks whether to snapshot.
	// raft adds jitter so servers do not snapshot in lockstep.
	SnapshotInterval time.Duration

	// SnapshotThreshold is how many log entries (count) must have been
	// appended since the last snapshot before a snapshot is taken.
	SnapshotThreshold uint64

	// MaxLogEntries caps the log by count: once this many entries were
	// applied since the last snapshot, a snapshot is taken at once rather
	// than at raft's next SnapshotInterval check (during which a busy
	// cluster can append hundreds of thousands). The log (bolt, memory-
	// mapped) then stays near TrailingLogs + MaxLogEntries entries whatever
	// the write rate: about 80 MB of log and resident memory at the default
	// with ~1 KB entries. Lower bounds memory and restart replay tighter
	// but snapshots more often (each writes the whole state); 0 turns the
	// cap off (only raft's timer snapshots). Must be 0 or >=
	// SnapshotThreshold.
	MaxLogEntries uint64

	// TrailingLogs is how many log entries (count) stay in the log after a
	// snapshot, so a slightly lagging follower catches up from the log
	// instead of receiving a whole snapshot.
	TrailingLogs uint64

	// RetainSnapshots is how many snapshot files (count) are kept on disk.
	RetainSnapshots int

	// ApplyTimeout bounds Apply, ApplyRaw, membership changes and reads
	// when the caller's context carries no deadline.
	ApplyTimeout time.Duration

	// MaxApplyBatch is the most commands (count, 1..1024) the leader
	// gathers from concurrent proposers into one log write (one fsync) and
	// the most entries per AppendEntries RPC (raft's MaxAppendEntries).
	// Each command still gets its own log entry and index. Higher raises
	// throughput under concurrency at the cost of larger RPCs.
	MaxApplyBatch int

	// MaxPool is how many idle TCP connections (count) the transport keeps
	// per peer for reuse.
	MaxPool int

	// MaxRPCsInFlight is how many AppendEntries RPCs (count) the leader
	// may have outstanding to one caught-up follower. 1 turns pipelining
	// off: the next batch waits for the previous answer (the follower's
	// fsync and a round trip). 2 or more lets the leader send the next
	// batch meanwhile, at the price of smaller batches (more RPCs, more
	// leader CPU per write) when writes are steady; raft's own figures
	// show little gain beyond 2. See DESIGN.md, "Pipelined replication".
	MaxRPCsInFlight int

	// NoEarlyAppend turns off the leader's early append (earlyappend.go):
	// with it set, the leader sends new entries to followers only after
	// its own fsync, as hashicorp/raft does, so a lone write pays two
	// fsyncs in series. For comparisons and tests.
	NoEarlyAppend bool

	// NonvoterReplicationInterval paces replication to a non-voter whose
	// clients wait for it (pace.go): after it forwarded a read-your-write
	// fence or a command whose result it computes itself, the leader sends
	// it an append at once, and further such forwards that this append
	// does not cover get the next one this interval after it (two in a
	// row after a quiet spell, for a lone write's commit index). With
	// NonvoterBackgroundInterval off it paces every non-voter, as below.
	// Otherwise NonvoterBackgroundInterval applies. Longer means fewer, larger RPCs
	// for each non-voter (less CPU per write on it and on the leader), at
	// the price of a write or read-your-write through a non-voter waiting
	// up to about this much under steady writes (a write after a quiet
	// spell does not). 0 turns pacing off (non-voters replicate like
	// voters).
	NonvoterReplicationInterval time.Duration

	// NonvoterBackgroundInterval paces replication to a non-voter none of
	// whose clients is waiting (no read-your-write fence or result-less
	// command it forwarded is undelivered to it; pace.go):
	// under steady writes such a non-voter lags by up to about this much
	// (its subscribers' events and plain reads trail by it), and gets
	// fewer, larger appends (less CPU per write on it and on the leader).
	// A non-voter whose clients wait is paced at
	// NonvoterReplicationInterval. At most NonvoterReplicationInterval
	// (or 0) turns the distinction off.
	NonvoterBackgroundInterval time.Duration

	// TransportTimeout is the I/O deadline for one raft RPC (scaled up for
	// snapshot installs by raft).
	TransportTimeout time.Duration

	// Forwarder, when set, lets Apply on a follower succeed: the command
	// is sent to the leader through it, and Apply returns the result this
	// server's own FSM computes for it. Nil makes Apply on a follower
	// return *NotLeaderError or ErrNoLeader. ApplyRaw never forwards.
	Forwarder Forwarder

	// StreamLayer, for tests / fault injection: when set, the transport
	// listens and dials through it instead of real TCP on BindAddr, and
	// its Addr() is the advertised address. The Store closes it on
	// Shutdown (through the transport).
	StreamLayer raft.StreamLayer

	// LogWriteFault, for tests / fault injection: when set, it is called
	// before every write of log entries, and a non-nil error is returned as
	// that write's error (e.g. syscall.ENOSPC to act out a full disk).
	LogWriteFault func() error
	// WrapStreamLayer, when set, wraps the transport's stream layer (the
	// TCP one or StreamLayer): node uses it to put mutual TLS under Raft.
	// The wrapper's Close must close the layer it wraps.
	WrapStreamLayer func(raft.StreamLayer) raft.StreamLayer

	// ObserveApply, when set, is called on the FSM goroutine after each
	// command entry a module handled, with the handler's wall time (the
	// FSM's share of a write, on every replica). It must not block: it
	// runs between two entries. node feeds a Prometheus histogram.
	ObserveApply func(t concordv1.CommandType, d time.Duration)
}

// DefaultConfig returns production defaults. NodeID and DataDir must still
// be set. The timings are the DefaultRaftMultiplier profile (timing.go),
// suited to a LAN with fsync'ed disks; SetRaftMultiplier picks another one.
// Tests use faster presets instead of changing these.
func DefaultConfig() Config {
	c := Config{
		BindAddr:          "127.0.0.1:7702",
		SnapshotInterval:  120 * time.Second,
		SnapshotThreshold: 8192,
		MaxLogEntries:     65536,
		TrailingLogs:      10240,
		RetainSnapshots:   2,
		ApplyTimeout:      10 * time.Second,
		MaxApplyBatch:     256,
		MaxPool:           3,
		TransportTimeout:  10 * time.Second,
	}
	c.MaxRPCsInFlight = 1 // pipelining off: no gain measured (DESIGN.md)
	c.NonvoterReplicationInterval = 20 * time.Millisecond
	c.NonvoterBackgroundInterval = 100 * time.Millisecond
	// 500 ms heartbeat and election, 250 ms lease, 50 ms commit.
	c.SetTimings(mustLANTimings(DefaultRaftMultiplier))
	return c
}

// Validate reports the first problem with c, or nil.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID is required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("DataDir is required"))
	}
	if c.StreamLayer == nil {
		if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
			errs = append(errs, fmt.Errorf("BindAddr: %w", err))
		}
		if c.AdvertiseAddr != "" {
			if _, err := net.ResolveTCPAddr("tcp", c.AdvertiseAddr); err != nil {
				errs = append(errs, fmt.Errorf("AdvertiseAddr: %w", err))
			}
		}
	}
	if c.RetainSnapshots < 1 {
		errs = append(errs, errors.New("RetainSnapshots must be >= 1"))
	}
	if c.ApplyTimeout <= 0 {
		errs = append(errs, errors.New("ApplyTimeout must be positive"))
	}
	if c.MaxPool < 1 {
		errs = append(errs, errors.New("MaxPool must be >= 1"))
	}
	if c.MaxRPCsInFlight < 1 {
		errs = append(errs, errors.New("MaxRPCsInFlight must be >= 1"))
	}
	if c.NonvoterReplicationInterval < 0 || c.NonvoterReplicationInterval > time.Second {
		errs = append(errs, errors.New("NonvoterReplicationInterval must be within 0..1s"))
	}
	if c.NonvoterBackgroundInterval < 0 || c.NonvoterBackgroundInterval > time.Second {
		errs = append(errs, errors.New("NonvoterBackgroundInterval must be within 0..1s"))
	}
	if c.TransportTimeout <= 0 {
		errs = append(errs, errors.New("TransportTimeout must be positive"))
	}
	if c.SnapshotThreshold < 1 {
		errs = append(errs, errors.New("SnapshotThreshold must be >= 1"))
	}
	if c.MaxLogEntries != 0 && c.MaxLogEntries < c.SnapshotThreshold {
		errs = append(errs, errors.New("MaxLogEntries must be 0 or >= SnapshotThreshold"))
	}
	if c.NodeID != "" {
		// raft checks its own timing invariants; reuse them rather than
		// duplicating (and drifting from) its rules.
		if err := raft.ValidateConfig(c.raftConfig(nil)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// raftConfig maps c onto raft's configuration.
func (c Config) raftConfig(fsmLogger *hclogAdapter) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	rc.MaxAppendEntries = c.MaxApplyBatch
	// raft group-commits on its own: the leader drains every queued
	// proposal (up to MaxAppendEntries) into one log write. Buffering
	// applyCh (BatchApplyCh) measured no better here and leaves futures
	// unresolved in the buffer at shutdown, so it stays off (DESIGN.md).
	rc.BatchApplyCh = false
	rc.NoLegacyTelemetry = true
	// A removed server keeps running (as a non-voter that starts no
	// elections) until its owner calls Shutdown: if raft shut itself down,
	// a later Store.Shutdown could not wait for raft's goroutines.
	rc.ShutdownOnRemove = false
	if fsmLogger != nil {
		rc.Logger = fsmLogger
	}
	return rc
}
