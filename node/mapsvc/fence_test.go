package mapsvc

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
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
		{"state, from a connection at its epoch", update, &concordv1.AgentUpdateRequest{AgentId: "a", State: str("busy"), OriginSessionId: "s", OriginSessionEpoch: 3}, true},
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
		index                            uint64
		class                            writeClass
		wantAll, wantStrict, wantConnect uint64
	}{
		{5, writeOther, 5, 5, 5},
		{7, writeNeutral, 7, 5, 5},
		{6, writeOther, 7, 6, 6}, // an older answer never lowers all
		{4, writeOther, 7, 6, 6}, // nor strict nor connect
		{9, writeNeutral, 9, 6, 6},
		{11, writeFreshSession, 11, 11, 6},
		{12, writeNeutral, 12, 11, 6},
		{13, writeOther, 13, 13, 13},
	}
	for i, st := range steps {
		f.raise(st.index, st.class)
		all, strict, conn := f.target(fenceAll), f.target(fenceStrict), f.target(fenceConnect)
		if all != st.wantAll || strict != st.wantStrict || conn != st.wantConnect {
			t.Fatalf("step %d: all %d strict %d connect %d, want %d %d %d", i, all, strict, conn, st.wantAll, st.wantStrict, st.wantConnect)
		}
	}
}

func TestClassify(t *testing.T) {
	open := concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN
	fresh := &concordv1.SessionOpenRequest{Session: &concordv1.SessionRecord{Id: "s", ParticipantId: "p"}}
	for _, tc := range []struct {
		name string
		typ  concordv1.CommandType
		msg  proto.Message
		want writeClass
	}{
		{"fresh session", open, fresh, writeFreshSession},
		{"resume", open, &concordv1.SessionOpenRequest{Session: &concordv1.SessionRecord{Id: "s"}, Resume: true}, writeOther},
		{"fresh session reclaiming agents", open, &concordv1.SessionOpenRequest{Session: &concordv1.SessionRecord{Id: "s"}, ReclaimAgents: []string{"a"}}, writeOther},
		{"neutral update", concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE, &concordv1.AgentUpdateRequest{AgentId: "a", State: proto.String("busy")}, writeNeutral},
		{"register", concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER, &concordv1.AgentRegisterRequest{}, writeOther},
		{"session close", concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE, &concordv1.SessionCloseRequest{SessionId: "s"}, writeOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.typ, tc.msg); got != tc.want {
				t.Fatalf("classify = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestConnectReadsRegistry(t *testing.T) {
	for _, tc := range []struct {
		name string
		cp   connectParams
		want bool
	}{
		{"anonymous, generated id", connectParams{participantType: TypeClient}, false},
		{"credential only", connectParams{participantType: TypeAgent, authMethod: "api-key", credential: "k"}, false},
		{"participantId", connectParams{participantType: TypeAgent, participantID: "p"}, true},
		{"sessionId", connectParams{participantType: TypeClient, sessionID: "s"}, true},
		{"resumeToken", connectParams{participantType: TypeClient, resumeToken: "s.t"}, true},
		{"reclaim", connectParams{participantType: TypeAgent, reclaim: []string{"a"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := connectReadsRegistry(&tc.cp); got != tc.want {
				t.Fatalf("connectReadsRegistry = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestConnect_FenceLevels: a connect that reads no sessions or agents
// skips the fresh sessions this node answered and waits for any other
// write; one that reads them (a chosen participantId, a resume) waits for
// every write, fresh sessions included.
func TestConnect_FenceLevels(t *testing.T) {
	var mu sync.Mutex
	var waited []uint64 // the largest index each connect waited for
	e := newEnv(t, func(c *Config) {
		store := c.Store.(*raftstore.Store)
		c.AppliedIndex = nil // every fence check goes through WaitFence, applied or not
		c.WaitFence = func(ctx context.Context, index uint64) error {
			mu.Lock()
			waited = append(waited, index)
			mu.Unlock()
			return store.WaitApplied(ctx, index)
		}
	})
	last := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		var m uint64
		for _, w := range waited {
			m = max(m, w)
		}
		waited = nil
		return m
	}
	connectAs(e.dial(), TypeClient, nil)
	freshIdx := e.svc.fence.target(fenceAll)
	if freshIdx == 0 || last() != 0 {
		t.Fatalf("first connect: fence %d, want > 0 and no wait", freshIdx)
	}
	connectAs(e.dial(), TypeClient, nil)
	if got := last(); got != 0 {
		t.Fatalf("a fresh connect after fresh sessions waited for index %d, want none", got)
	}
	all := e.svc.fence.target(fenceAll)
	connectAs(e.dial(), TypeAgent, map[string]any{"participantId": "p1"})
	if got := last(); got != all {
		t.Fatalf("a connect with participantId waited for %d, want the whole fence %d", got, all)
	}
	agent := e.dial()
	res := connectAs(agent, TypeAgent, nil)
	last()
	agent.must("map/agents/register", map[string]any{"agentId": "a1", "name": "a1"})
	reg := e.svc.fence.target(fenceAll)
	connectAs(e.dial(), TypeClient, nil)
	if got := last(); got != reg {
		t.Fatalf("a fresh connect after a register waited for %d, want %d", got, reg)
	}
	connectAs(e.dial(), TypeClient, nil) // a fresh session after the register
	all = e.svc.fence.target(fenceAll)
	last()
	connectAs(e.dial(), TypeAgent, map[string]any{"resumeToken": res["resumeToken"]})
	if got := last(); got < all {
		t.Fatalf("a resume waited for %d, want the whole fence %d", got, all)
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
			s.fence.raise(7, writeOther)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			if err := s.awaitFence(ctx, fenceAll); err != nil {
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
		level    fenceLevel
		wantWait bool
	}{
		{"applied past the fence", 9, fenceAll, false},
		{"applied exactly the fence", 7, fenceAll, false},
		{"behind the fence", 6, fenceAll, true},
		{"behind, tolerant, strict part applied", 6, fenceStrict, false},
		{"behind the strict part", 4, fenceStrict, true},
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
			s.fence.raise(5, writeOther)
			s.fence.raise(7, writeNeutral)
			if err := s.awaitFence(context.Background(), tt.level); err != nil {
				t.Fatal(err)
			}
			if waited != tt.wantWait {
				t.Fatalf("waited %v, want %v", waited, tt.wantWait)
			}
			if !tt.wantWait {
				if allocs := testing.AllocsPerRun(100, func() { _ = s.awaitFence(context.Background(), tt.level) }); allocs != 0 {
					t.Fatalf("%.0f allocations passing an applied fence, want 0", allocs)
				}
			}
		})
	}
}
