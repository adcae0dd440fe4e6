package mapsvc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestNeutralWrite(t *testing.T) {
	str := func(s string) *string { return &s }
	update := concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE
	for _, tc := range []struct {
		name string
		typ  concordv1.CommandType
		msg  proto.Message
		want bool
	}{
		{"metadata", update, &concordv1.AgentUpdateRequest{AgentId: "a", Meta: &concordv1.CommandMeta{}, Metadata: []byte(`{}`)}, true},
		{"state and name", update, &concordv1.AgentUpdateRequest{AgentId: "a", State: str("busy"), Name: str("n"), Description: str("d")}, true},
		{"environment, descriptor, reason", update, &concordv1.AgentUpdateRequest{AgentId: "a", Environment: []byte(`{}`), CapabilityDescriptor: []byte(`{}`), Reason: "r"}, true},
		{"permission overrides", update, &concordv1.AgentUpdateRequest{AgentId: "a", PermissionOverrides: []byte(`{}`)}, false},
		{"capabilities", update, &concordv1.AgentUpdateRequest{AgentId: "a", Capabilities: []byte(`{}`)}, false},
		{"role", update, &concordv1.AgentUpdateRequest{AgentId: "a", Role: str("r")}, false},
		{"visibility", update, &concordv1.AgentUpdateRequest{AgentId: "a", Visibility: str("public")}, false},
		{"transition", update, &concordv1.AgentUpdateRequest{AgentId: "a", Transition: "stop"}, false},
		{"owner", update, &concordv1.AgentUpdateRequest{AgentId: "a", SetOwner: true, OwnerId: "p"}, false},
		{"register", concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER, &concordv1.AgentRegisterRequest{}, false},
		{"scope join", concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN, &concordv1.ScopeJoinRequest{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := neutralWrite(tc.typ, tc.msg); got != tc.want {
				t.Fatalf("neutralWrite = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFence(t *testing.T) {
	var f fence
	steps := []struct {
		index             uint64
		neutral           bool
		wantAll, wantStrc uint64
	}{
		{5, false, 5, 5},
		{7, true, 7, 5},
		{6, false, 7, 6}, // an older answer never lowers all
		{4, false, 7, 6}, // nor strict
		{9, true, 9, 6},
		{10, false, 10, 10},
	}
	for i, st := range steps {
		f.raise(st.index, st.neutral)
		if all, strict := f.target(false), f.target(true); all != st.wantAll || strict != st.wantStrc {
			t.Fatalf("step %d: all %d strict %d, want %d %d", i, all, strict, st.wantAll, st.wantStrc)
		}
	}
}

// TestAwaitFence_Bounded: the fence wait never outlasts fenceWaitLimit,
// whatever the request's own deadline, so a cut-off replica answers a
// prompt retryable error instead of letting the caller time out.
func TestAwaitFence_Bounded(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration // 0: no deadline
		want    time.Duration // at most this far ahead
	}{
		{"no deadline", 0, fenceWaitLimit},
		{"longer deadline", time.Hour, fenceWaitLimit},
		{"shorter deadline", 100 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got time.Duration
			s := &Service{}
			s.cfg.WaitFence = func(ctx context.Context, index uint64) error {
				d, ok := ctx.Deadline()
				if !ok {
					t.Fatal("fence wait without a deadline")
				}
				got = time.Until(d)
				return nil
			}
			s.fence.raise(7, false)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			if err := s.awaitFence(ctx, false); err != nil {
				t.Fatal(err)
			}
			if got > tt.want || got <= 0 {
				t.Fatalf("fence wait deadline %v ahead, want (0, %v]", got, tt.want)
			}
		})
	}
}

// TestAwaitFence_AppliedSkipsWait: with AppliedIndex set, a fence the
// replica already applied is passed without calling the wait (no timer
// context per request); one it has not applied still waits, bounded.
func TestAwaitFence_AppliedSkipsWait(t *testing.T) {
	for _, tt := range []struct {
		name     string
		applied  uint64
		tolerant bool
		wantWait bool
	}{
		{"applied past the fence", 9, false, false},
		{"applied exactly the fence", 7, false, false},
		{"behind the fence", 6, false, true},
		{"behind, tolerant, strict part applied", 6, true, false},
		{"behind the strict part", 4, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			waited := false
			s := &Service{}
			s.cfg.AppliedIndex = func() uint64 { return tt.applied }
			s.cfg.WaitFence = func(ctx context.Context, index uint64) error {
				if _, ok := ctx.Deadline(); !ok {
					t.Fatal("fence wait without a deadline")
				}
				waited = true
				return nil
			}
			s.fence.raise(5, false)
			s.fence.raise(7, true)
			if err := s.awaitFence(context.Background(), tt.tolerant); err != nil {
				t.Fatal(err)
			}
			if waited != tt.wantWait {
				t.Fatalf("waited %v, want %v", waited, tt.wantWait)
			}
			if !tt.wantWait {
				if allocs := testing.AllocsPerRun(100, func() { _ = s.awaitFence(context.Background(), tt.tolerant) }); allocs != 0 {
					t.Fatalf("%.0f allocations passing an applied fence, want 0", allocs)
				}
			}
		})
	}
}
