// Package storeerr turns the errors of proposing to (or reading from) the
// Raft store into the MAP error a participant sees when the cluster cannot
// serve a write right now: a retryable 4000 EXHAUSTED whose details.reason is
// a stable code a client can branch on (the text of the underlying error
// goes in details.error, for humans and logs). node/mapsvc and node/runs
// share it so every method answers availability problems the same way.
package storeerr

import (
	"context"
	"errors"

	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/raftstore"
)

// Reasons in details.reason. OutcomeUnknown is the one to heed: the command
// may or may not have been committed, so only an idempotent request (or one
// the client first checks) is safe to repeat.
const (
	ReasonNoLeader       = "no_leader"
	ReasonNotLeader      = "not_leader"
	ReasonTimeout        = "timeout"
	ReasonOutcomeUnknown = "outcome_unknown"
	ReasonShuttingDown   = "shutting_down"
	// ReasonDiskFull: a node could not write its Raft log for lack of
	// space; nothing was committed by that write. Retry once space returns
	// (or another leader takes over); /v1/ready names the disk.
	ReasonDiskFull = "disk_full"
)

// reasons is checked in order: the first sentinel err matches decides.
// Leadership loss comes before timeout because a forward that timed out
// waiting for the leader reports both, and "outcome unknown" is the
// stronger statement.
var reasons = []struct {
	err    error
	reason string
}{
	{raftstore.ErrLeadershipLost, ReasonOutcomeUnknown},
	{raftstore.ErrDiskFull, ReasonDiskFull},
	{raftstore.ErrShutdown, ReasonShuttingDown},
	{raftstore.ErrNoLeader, ReasonNoLeader},
	{raftstore.ErrNotLeader, ReasonNotLeader},
	{raftstore.ErrTimeout, ReasonTimeout},
	{context.DeadlineExceeded, ReasonTimeout},
	{context.Canceled, ReasonTimeout},
}

// Unavailable returns the retryable MAP error for err and true when err
// says the cluster could not serve the request (no leader, timeout,
// leadership lost, shutdown, disk full); otherwise nil and false.
func Unavailable(err error) (*rpc.Error, bool) {
	if err == nil {
		return nil, false
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return rpc.NewError(rpc.CodeExhausted, "Cluster unavailable, retry").
				WithDetails(map[string]any{"reason": r.reason, "error": err.Error()}), true
		}
	}
	return nil, false
}
