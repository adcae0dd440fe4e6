package backup

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/internal/backoff"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Save and Restore are safe to repeat: a save only reads, and restoring
// the same file again yields the same state. So a call that failed because
// leadership moved (no leader yet, leadership lost while the restore
// committed, a leader that stepped down) is retried until ctx ends; a
// restore whose outcome was unknown is then made certain.

// retryable reports whether err says only that leadership was in flux.
func retryable(err error) bool {
	st, ok := status.FromError(err) // finds a status wrapped with %w
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Aborted:
		return true
	case codes.FailedPrecondition:
		// Only a not-leader answer (it carries a ForwardError detail); a
		// file this binary cannot read is FailedPrecondition too.
		for _, d := range st.Details() {
			if fe, ok := d.(*concordv1.ForwardError); ok {
				return fe.GetReason() == concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_NOT_LEADER
			}
		}
	}
	return false
}

// withRetry runs op until it succeeds, fails for another reason, or ctx
// ends (then the last error is returned).
func withRetry[T any](ctx context.Context, op func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		v, err := op()
		if err == nil || !retryable(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff.Delay(attempt, 100*time.Millisecond, 2*time.Second, nil)):
		}
	}
}
