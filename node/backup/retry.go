package backup

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/internal/backoff"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Save and Restore are safe to repeat: a save only reads, and restoring
// the same file again yields the same state. So a call that failed because
// leadership moved (no leader yet, leadership lost while the restore
// committed, a leader that stepped down) is retried until ctx ends; a
// restore whose outcome was unknown is then made certain.
//
// A node never reached is not waited for: a wrong address or port, or TLS
// settings the node refuses, fail the same way (Unavailable) as an
// election does, but no election ends them, and retrying would hold the
// operator for the whole deadline (5 minutes by default) before saying so.

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
// ends (then the last error is returned). op passes opts to its call; they
// record whether the node answered, and until one attempt reached it a
// connection error (Unavailable) is returned at once.
func withRetry[T any](ctx context.Context, op func(opts ...grpc.CallOption) (T, error)) (T, error) {
	reached := false
	for attempt := 0; ; attempt++ {
		var p peer.Peer
		v, err := op(grpc.Peer(&p))
		reached = reached || p.Addr != nil
		if err == nil || !retryable(err) || (!reached && status.Code(err) == codes.Unavailable) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff.Delay(attempt, 100*time.Millisecond, 2*time.Second, nil)):
		}
	}
}
