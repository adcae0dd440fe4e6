package storeerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/raftstore"
)

func TestUnavailable(t *testing.T) {
	tests := []struct {
		err    error
		reason string // "" = not an availability error
	}{
		{fmt.Errorf("forward: %w: %w", errors.New("cluster: no leader"), raftstore.ErrNoLeader), ReasonNoLeader},
		{&raftstore.NotLeaderError{LeaderID: "n2"}, ReasonNotLeader},
		{fmt.Errorf("forward to n3: %w: %w", raftstore.ErrTimeout, context.DeadlineExceeded), ReasonTimeout},
		{fmt.Errorf("no answer: %w: %w", raftstore.ErrLeadershipLost, raftstore.ErrTimeout), ReasonOutcomeUnknown},
		{raftstore.ErrShutdown, ReasonShuttingDown},
		{fmt.Errorf("%w: write raft log: no space left on device (%w)", raftstore.ErrDiskFull, raftstore.ErrNoLeader), ReasonDiskFull},
		{fmt.Errorf("%w: %w", raftstore.ErrLeadershipLost, raftstore.ErrDiskFull), ReasonOutcomeUnknown},
		{context.Canceled, ReasonTimeout},
		{errors.New("registry: agent exists"), ""},
		{nil, ""},
	}
	for _, tt := range tests {
		e, ok := Unavailable(tt.err)
		if tt.reason == "" {
			if ok {
				t.Errorf("%v: got %v, want not an availability error", tt.err, e)
			}
			continue
		}
		if !ok || e.Code != rpc.CodeExhausted || !e.Data.Retryable || e.Data.Details["reason"] != tt.reason {
			t.Errorf("%v: got %+v, want retryable 4000 with reason %q", tt.err, e, tt.reason)
		}
	}
}
