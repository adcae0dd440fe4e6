package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// TestForward_FollowerApplyReachesLeader: Store.Apply on a follower goes
// through the Forwarder to the leader, and the follower returns the result
// its own FSM computed, domain errors included.
func TestForward_FollowerApplyReachesLeader(t *testing.T) {
	nodes, _ := newTestCluster(t, 3, true)
	leader, followers := leaderOf(t, nodes)
	f := followers[0]
	ctx := testCtx(t)
	res, idx, err := f.store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s1", f.id))
	if err != nil {
		t.Fatalf("Apply on follower %s: %v", f.id, err)
	}
	sr, ok := res.(registry.SessionResult)
	if !ok || sr.Session.ID != "s1" || idx == 0 {
		t.Fatalf("Apply = %#v at %d, want the session result", res, idx)
	}
	// The leader's result answered: the follower's replica has the
	// session once it applied the index.
	if err := f.store.WaitApplied(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if s, ok := f.reg.Session("s1"); !ok || s.HomeNode != f.id {
		t.Fatalf("follower's replica lacks the session it forwarded: %+v %v", s, ok)
	}
	if err := leader.store.WaitApplied(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if _, ok := leader.reg.Session("s1"); !ok {
		t.Fatal("leader lacks the forwarded session")
	}
	// The same open again is a domain error: committed, rejected by the
	// module on every replica, and returned to the follower's caller.
	_, idx2, err := f.store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s1", f.id))
	var re *registry.Error
	var ce *raftstore.CommandError
	if !errors.As(err, &re) || !errors.As(err, &ce) || ce.Index != idx2 || idx2 <= idx {
		t.Fatalf("duplicate open on follower = %v at %d, want a CommandError with the registry error", err, idx2)
	}
}

// TestForward_RedirectedByNotLeader: sent to a follower, the command is
// refused with NOT_LEADER naming the leader, and the Forwarder follows it.
func TestForward_RedirectedByNotLeader(t *testing.T) {
	nodes, _ := newTestCluster(t, 3, true)
	leader, followers := leaderOf(t, nodes)
	cmd := encode(t, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s2", followers[0].id))
	reply, err := followers[0].fwd.Forward(testCtx(t), followers[1].id, "", cmd)
	if err != nil {
		t.Fatalf("Forward via the other follower: %v", err)
	}
	if err := leader.store.WaitApplied(testCtx(t), reply.Index); err != nil {
		t.Fatal(err)
	}
	if _, ok := leader.reg.Session("s2"); !ok {
		t.Fatal("command not applied")
	}
}

// TestForward_NoLeaderGivesUpInTime: a server whose store has never been
// bootstrapped knows no leader; Forward retries for ForwardRetryTimeout
// and returns a retryable no-leader error.
func TestForward_NoLeaderGivesUpInTime(t *testing.T) {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	st, err := raftstore.New(raftstore.TestConfig(t, "lonely", reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), scaled(10*time.Second))
		defer cancel()
		_ = st.Shutdown(ctx)
	})
	srv := startServer(t, testConfig(t, "lonely"), ServerDeps{Store: st}, nil)
	cfg := testConfig(t, "origin")
	cfg.ForwardRetryTimeout = 400 * time.Millisecond
	fwd, err := NewForwarder(cfg, newResolver("lonely", srv.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	cmd := encode(t, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s", "origin"))
	for _, target := range []string{"lonely", "ghost", ""} {
		start := time.Now()
		_, err = fwd.Forward(testCtx(t), target, "", cmd)
		if !errors.Is(err, ErrNoLeader) || !errors.Is(err, raftstore.ErrNoLeader) {
			t.Fatalf("Forward to %q = %v, want ErrNoLeader", target, err)
		}
		if el := time.Since(start); el < cfg.ForwardRetryTimeout/2 || el > cfg.ForwardRetryTimeout+scaled(time.Second) {
			t.Fatalf("Forward to %q gave up after %s, want about %s", target, el, cfg.ForwardRetryTimeout)
		}
	}
	// The caller's deadline wins over the retry budget.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := fwd.Forward(ctx, "lonely", "", cmd); err == nil || time.Until(mustDeadline(ctx)) < -scaled(300*time.Millisecond) {
		t.Fatalf("Forward with a 50 ms deadline = %v, returned late", err)
	}
}

func mustDeadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// TestForward_ErrorMapping runs every store outcome through the server's
// translation and the Forwarder's classification, on the ForwardStream and
// on unary Forward calls: both must answer alike.
func TestForward_ErrorMapping(t *testing.T) {
	tests := []struct {
		name      string
		storeErr  error
		wantIdx   uint64
		want      error // nil: success
		wantCalls int64 // 0: retried (more than one call)
	}{
		{"ok", nil, 7, nil, 1},
		{"domain error", &raftstore.CommandError{Index: 9, Err: errTest}, 9, nil, 1},
		{"no leader", raftstore.ErrNoLeader, 0, ErrNoLeader, 0},
		{"not leader, leader unknown to gossip", &raftstore.NotLeaderError{LeaderID: "ghost"}, 0, ErrNoLeader, 1}, // then retries ghost
		{"disk full: retried, then named", fmt.Errorf("%w: no space left on device", raftstore.ErrDiskFull), 0, raftstore.ErrDiskFull, 0},
		{"leadership lost", raftstore.ErrLeadershipLost, 0, raftstore.ErrLeadershipLost, 1},
		{"timeout", raftstore.ErrTimeout, 0, raftstore.ErrTimeout, 1},
		{"shutdown", raftstore.ErrShutdown, 0, raftstore.ErrLeadershipLost, 1},
		{"unknown command", raftstore.ErrUnknownCommand, 0, raftstore.ErrUnknownCommand, 1},
		{"invalid command", raftstore.ErrInvalidCommand, 0, raftstore.ErrInvalidCommand, 1},
		{"other", errTest, 0, raftstore.ErrLeadershipLost, 1},
	}
	for _, mode := range []string{"stream", "unary"} {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				fs := &fakeStore{id: "L", err: tc.storeErr}
				srv := startServer(t, testConfig(t, "L"), ServerDeps{Store: fs}, nil)
				cfg := testConfig(t, "origin")
				// Long enough for the first dial on a loaded machine (150 ms
				// was not: "no leader reachable" instead of the store's
				// error); the rows that retry until it ends take this long.
				cfg.ForwardRetryTimeout = time.Second
				cfg.ForwardUnaryOnly = mode == "unary"
				fwd, err := NewForwarder(cfg, newResolver("L", srv.addr))
				if err != nil {
					t.Fatal(err)
				}
				defer fwd.Close()
				reply, err := fwd.Forward(testCtx(t), "L", "", []byte{1, 2})
				idx := reply.Index
				if tc.want == nil && (err != nil || idx != tc.wantIdx) {
					t.Fatalf("Forward = %d, %v; want %d, nil", idx, err, tc.wantIdx)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Fatalf("Forward = %v, want %v", err, tc.want)
				}
				calls := fs.calls.Load()
				if tc.wantCalls > 0 && calls != tc.wantCalls {
					t.Fatalf("%d calls to the leader, want %d (no retry once proposed)", calls, tc.wantCalls)
				}
				if tc.wantCalls == 0 && calls < 2 {
					t.Fatalf("%d calls to the leader, want retries", calls)
				}
			})
		}
	}
}

// TestForward_LeaderUnreachable: gossip names an address where nothing
// listens; nothing can have been sent, so Forward retries, then gives up.
func TestForward_LeaderUnreachable(t *testing.T) {
	lis := listen(t, "")
	addr := lis.Addr().String()
	lis.Close()
	cfg := testConfig(t, "origin")
	cfg.ForwardRetryTimeout = 300 * time.Millisecond
	cfg.DialTimeout = 100 * time.Millisecond
	fwd, err := NewForwarder(cfg, newResolver("L", addr))
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	if _, err := fwd.Forward(testCtx(t), "L", "", []byte{1}); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Forward = %v, want ErrNoLeader", err)
	}
}
