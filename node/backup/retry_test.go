package backup

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func withDetail(code codes.Code, reason concordv1.ForwardErrorReason) error {
	st, err := status.New(code, "x").WithDetails(&concordv1.ForwardError{Reason: reason})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no leader", status.Error(codes.Unavailable, "no raft leader"), true},
		{"leadership lost", fmt.Errorf("restore snapshot: %w", status.Error(codes.Aborted, "lost")), true},
		{"not leader", withDetail(codes.FailedPrecondition, concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_NOT_LEADER), true},
		{"future version", status.Error(codes.FailedPrecondition, "version 9 is not supported"), false},
		{"corrupt", status.Error(codes.InvalidArgument, "checksum mismatch"), false},
		{"deadline", status.Error(codes.DeadlineExceeded, "late"), false},
		{"not grpc", errors.New("disk full"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryable(tt.err); got != tt.want {
				t.Fatalf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestWithRetry_StopsOnSuccessOtherErrorsAndContext(t *testing.T) {
	flaky := status.Error(codes.Unavailable, "election")
	calls := 0
	v, err := withRetry(context.Background(), func() (int, error) {
		calls++
		if calls < 3 {
			return 0, flaky
		}
		return 7, nil
	})
	if v != 7 || err != nil || calls != 3 {
		t.Fatalf("got %d, %v after %d calls", v, err, calls)
	}
	calls = 0
	hard := status.Error(codes.InvalidArgument, "corrupt")
	if _, err := withRetry(context.Background(), func() (int, error) { calls++; return 0, hard }); err != hard || calls != 1 {
		t.Fatalf("non-retryable: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := withRetry(ctx, func() (int, error) { return 0, flaky }); err != flaky {
		t.Fatalf("after the deadline: %v, want the last error", err)
	}
}
