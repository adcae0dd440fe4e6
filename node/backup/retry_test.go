package backup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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

// answered is an op's view of its call: the node was reached (the
// PeerCallOption that withRetry passes is filled, as grpc does once a
// transport stream exists) or not.
func answered(reached bool, opts []grpc.CallOption) {
	for _, o := range opts {
		if po, ok := o.(grpc.PeerCallOption); ok && reached {
			po.PeerAddr.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7701}
		}
	}
}

func TestWithRetry_StopsOnSuccessOtherErrorsAndContext(t *testing.T) {
	flaky := status.Error(codes.Unavailable, "election")
	calls := 0
	v, err := withRetry(context.Background(), func(opts ...grpc.CallOption) (int, error) {
		calls++
		answered(true, opts)
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
	if _, err := withRetry(context.Background(), func(opts ...grpc.CallOption) (int, error) { calls++; answered(true, opts); return 0, hard }); err != hard || calls != 1 {
		t.Fatalf("non-retryable: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := withRetry(ctx, func(opts ...grpc.CallOption) (int, error) { answered(true, opts); return 0, flaky }); err != flaky {
		t.Fatalf("after the deadline: %v, want the last error", err)
	}
}

// A node that never answered is not retried (wrong address, port or TLS
// settings look like an election to the status code); once one attempt
// reached it, a later connection error is (the leader restarting).
func TestWithRetry_UnreachedNodeNotRetried(t *testing.T) {
	refused := status.Error(codes.Unavailable, "connection refused")
	calls := 0
	if _, err := withRetry(context.Background(), func(opts ...grpc.CallOption) (int, error) { calls++; return 0, refused }); err != refused || calls != 1 {
		t.Fatalf("never reached: %v after %d calls, want the error after 1", err, calls)
	}
	calls = 0
	v, err := withRetry(context.Background(), func(opts ...grpc.CallOption) (int, error) {
		calls++
		switch calls {
		case 1:
			answered(true, opts)
			return 0, status.Error(codes.Unavailable, "no raft leader")
		case 2:
			return 0, refused
		}
		answered(true, opts)
		return 7, nil
	})
	if v != 7 || err != nil || calls != 3 {
		t.Fatalf("reached once: got %d, %v after %d calls", v, err, calls)
	}
}

// Save toward a port nobody listens on fails at once, not at the end of
// its deadline, and leaves no file behind.
func TestSave_UnreachableNodeFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nobody listens there now
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	start := time.Now()
	_, err = Save(ctx, cc, filepath.Join(dir, "b.snap"))
	if status.Code(err) != codes.Unavailable || time.Since(start) > 10*time.Second {
		t.Fatalf("save to %s: %v after %v, want Unavailable at once", addr, err, time.Since(start))
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
}

// Save onto a directory is refused before any node is asked.
func TestSave_OntoDirectoryRefused(t *testing.T) {
	dir := t.TempDir()
	_, err := Save(context.Background(), nil, dir)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("save onto a directory: %v", err)
	}
}
