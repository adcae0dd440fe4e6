package raftstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Sentinel errors. raft's own errors never leave this package: translate maps
// them onto these so callers branch with errors.Is and never import raft.
var (
	// ErrNotLeader matches every *NotLeaderError. Returned (inside a
	// *NotLeaderError) when a write, a membership change or a linearizable
	// read reaches a node that is not the leader while a leader is known.
	// The command was not proposed; forward it to the leader and retry.
	ErrNotLeader = errors.New("raftstore: not leader")

	// ErrNoLeader is returned when this node is not the leader and knows of
	// no leader (an election is in progress, or the node is cut off), or
	// when the leader is handing leadership over. Nothing was proposed;
	// retry after a short backoff.
	ErrNoLeader = errors.New("raftstore: no leader")

	// ErrLeadershipLost is returned when this node stopped being leader
	// after it had appended the command to its log but before the command
	// was known to be committed. The command MAY OR MAY NOT be committed
	// (a new leader can still commit it). It is retryable only for
	// idempotent commands, or after checking whether it took effect.
	ErrLeadershipLost = errors.New("raftstore: leadership lost while committing")

	// ErrTimeout is returned when raft could not accept the command in time
	// (its apply queue was full) or the caller's context deadline (or
	// Config.ApplyTimeout when the context has none) passed while waiting.
	// In the second case the command may still commit later. Errors that
	// come from a context deadline also match context.DeadlineExceeded.
	ErrTimeout = errors.New("raftstore: timeout")

	// ErrShutdown is returned by every operation after Shutdown has begun,
	// and to callers still waiting when the Store is shut down.
	ErrShutdown = errors.New("raftstore: shut down")

	// ErrUnknownCommand is returned by Apply for a command type that no
	// registered module handles and that lacks the ignorable bit (0x80):
	// proposing it would make every replica panic, so it is refused before
	// it reaches the log. ApplyRaw (bytes from another process) returns it
	// for every type no module handles, ignorable or not.
	ErrUnknownCommand = errors.New("raftstore: unknown command type")

	// ErrInvalidCommand is returned by Apply and ApplyRaw when the command
	// cannot be proposed as it is: empty data, type 0, a body that does not
	// decode or a NOOP carrying unknown fields (ApplyRaw), or a message of the wrong type for the command
	// (Apply). Nothing was proposed.
	ErrInvalidCommand = errors.New("raftstore: invalid command")

	// ErrDiskFull is returned (wrapped with the write's error) by Apply and
	// ApplyRaw while this server cannot write its log because the disk (or
	// a quota) is full: a leader that fails to append steps down and
	// nothing is committed, so the write may be retried once space returns
	// or another leader takes over. An availability error (no leader,
	// timeout) on a server whose last log write failed for space wraps it
	// too, since the full disk is the cause to report. DiskFull tells
	// whether the condition persists.
	ErrDiskFull = errors.New("raftstore: disk full")

	// ErrNothingToSnapshot is returned by Snapshot when the FSM has applied
	// nothing since this Store started (raft's rule; a snapshot at an
	// unchanged index is otherwise taken again).
	ErrNothingToSnapshot = errors.New("raftstore: nothing new to snapshot")

	// ErrResultUnavailable is returned by an Apply forwarded from a
	// follower when the command IS committed (at the returned index) but
	// reached this server inside a snapshot instead of being applied here,
	// so there is no result to return. Rare: the follower must fall a
	// whole snapshot behind while it waits.
	ErrResultUnavailable = errors.New("raftstore: command committed but its result is not available here")

	// ErrInvalidConfig is returned by Config.Validate, New and LANTimings
	// for a configuration that cannot work; the message names the field.
	ErrInvalidConfig = errors.New("raftstore: invalid config")

	// ErrBadSnapshot is returned by Restore (and by raft, from it) when a
	// snapshot stream is malformed: wrong format version, unknown module,
	// records out of order, or a module that did not read all its records.
	ErrBadSnapshot = errors.New("raftstore: bad snapshot")

	// ErrHalt, wrapped in the error of a Handler's Apply or a Module's Restore,
	// says that this build cannot apply the log from here on the way the other
	// replicas do (a replicated record says the system already relies on
	// behaviour this build lacks, as after a downgrade in place): carrying on
	// would diverge silently. The FSM halts: it applies no later entry (nor the
	// halting one: the applied index stays before it), takes no snapshot (one
	// would persist state this build could not complete), and Halted closes, so
	// the owner reports the error and stops the node. The log itself is kept;
	// a build that understands it applies it all on restart.
	ErrHalt = errors.New("raftstore: this build cannot apply the log")
)

// NotLeaderError says which node is the leader, so the caller can forward
// the request there. errors.Is(err, ErrNotLeader) is true for it.
type NotLeaderError struct {
	// LeaderID is the leader's raft server ID (its node ID).
	LeaderID string
	// LeaderAddr is the leader's raft transport address.
	LeaderAddr string
}

// Error implements error.
func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("raftstore: not leader (leader is %s at %s)", e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) match.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// CommandError carries the error a module's handler returned for a command:
// the command IS committed at Index (every replica applied it and got the
// same error, leaving state unchanged), but the module rejected it.
// errors.Is and errors.As see through it to the module's own error value
// and type.
type CommandError struct {
	// Type is the command type that was applied.
	Type concordv1.CommandType
	// Index is the raft log index the command was committed at.
	Index uint64
	// Err is the module's error, as returned by its Handler.Apply.
	Err error
}

// Error implements error.
func (e *CommandError) Error() string {
	return fmt.Sprintf("raftstore: command %s at index %d: %v", e.Type, e.Index, e.Err)
}

// Unwrap returns the module's error.
func (e *CommandError) Unwrap() error { return e.Err }

// translate maps an error from raft onto this package's errors. leader is
// consulted only for raft.ErrNotLeader.
func (s *Store) translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return s.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: leadership transfer in progress", ErrNoLeader)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrTimeout
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		return ErrNothingToSnapshot
	case errors.Is(err, raft.ErrCantBootstrap):
		return err // handled by the bootstrap callers
	}
	// raft's LogCache flattens the log store's error into text, so a
	// failed append is recognised by the state the log store recorded.
	if full := s.bolt.diskFull(); full != nil {
		return full // raft's text only repeats it
	}
	return fmt.Errorf("raftstore: %w", err)
}

// DiskFull returns the error of this server's last log write when it
// failed because the disk is full (matching ErrDiskFull), nil once a write
// succeeds again. While it is set, a call at most once a second writes a
// 256 KiB scratch file in the data dir to see whether space has returned
// (a quiet follower writes no log), and clears it if so. Readiness probes
// report it.
func (s *Store) DiskFull() error { return s.bolt.recheckFull() }

// blameDisk wraps an availability error with the full disk behind it,
// when this server's last log write failed for space: "no leader" or a
// timeout is then a symptom, and a client is better told the cause.
func (s *Store) blameDisk(err error) error {
	if err == nil || errors.Is(err, ErrDiskFull) || errors.Is(err, ErrLeadershipLost) {
		return err
	}
	full := s.bolt.diskFull()
	if full == nil || !(errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrTimeout)) {
		return err
	}
	return fmt.Errorf("%w (%w)", full, err)
}

// notLeader builds the error for "this node cannot serve this, go to the
// leader": a *NotLeaderError when a leader is known, ErrNoLeader otherwise.
func (s *Store) notLeader() error {
	addr, id := s.raft.LeaderWithID()
	if id == "" || string(id) == s.id {
		// Raft may still name this node as leader while it steps down.
		return ErrNoLeader
	}
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
}

// ctxErr turns a finished context into this package's error: a deadline
// matches both ErrTimeout and context.DeadlineExceeded; a cancellation is
// returned wrapped so it matches context.Canceled.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("raftstore: %w", err)
}

// Snapshot file errors (backup.go).
var (
	// ErrUnsupportedVersion matches every *VersionError: a snapshot file or
	// stream written in a format version this binary does not read.
	// Nothing was changed.
	ErrUnsupportedVersion = errors.New("raftstore: unsupported format version")

	// ErrCorruptSnapshotFile is returned when a snapshot file is not one
	// (bad magic), is truncated, or fails its checksum. Nothing was changed.
	ErrCorruptSnapshotFile = errors.New("raftstore: corrupt snapshot file")
)

// VersionError reports a format version this binary does not understand.
// It matches ErrUnsupportedVersion and ErrBadSnapshot.
type VersionError struct {
	What string // "snapshot file" or "snapshot stream format"
	Got  uint32
	Max  uint32 // the newest version this binary reads (from 1)
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("raftstore: %s version %d is not supported: this binary reads versions 1 to %d (a newer concord wrote it?)",
		e.What, e.Got, e.Max)
}

// Is makes errors.Is match ErrUnsupportedVersion and ErrBadSnapshot.
func (e *VersionError) Is(target error) bool {
	return target == ErrUnsupportedVersion || target == ErrBadSnapshot
}
