package raftstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestStore_ApplyTimeoutWithoutDeadline: an Apply whose context has no
// deadline is bounded by Config.ApplyTimeout (a pooled timer, not a
// derived context) and fails with ErrTimeout; the timers and channels it
// pooled serve later Applies without a spurious timeout.
func TestStore_ApplyTimeoutWithoutDeadline(t *testing.T) {
	release := make(chan struct{})
	gate := &tableModule{name: "gate", h: map[concordv1.CommandType]Handler{
		cmdKVPut: {
			New: func() proto.Message { return &wrapperspb.StringValue{} },
			Apply: func(_ uint64, msg proto.Message) (any, error) {
				if msg.(*wrapperspb.StringValue).GetValue() == "block" {
					<-release
				}
				return "ok", nil
			},
		},
	}}
	cfg := TestConfig(t, "test-node", gate)
	// Long enough that an ordinary write on a loaded CI host never
	// reaches it (300 ms did, once, at load average 12).
	cfg.ApplyTimeout = scaled(2 * time.Second)
	s := StartTestStore(t, cfg)
	var once bool
	unblock := func() {
		if !once {
			once = true
			close(release)
		}
	}
	t.Cleanup(unblock) // before the store's shutdown (cleanups run last first)

	for i := range 50 { // the pools fill: timers stopped before firing
		if res, _, err := s.Apply(context.Background(), cmdKVPut, wrapperspb.String("x")); err != nil || res != "ok" {
			t.Fatalf("apply %d: %v %v", i, res, err)
		}
	}
	start := time.Now()
	_, _, err := s.Apply(context.Background(), cmdKVPut, wrapperspb.String("block"))
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked apply: err %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if took < cfg.ApplyTimeout || took > cfg.ApplyTimeout+scaled(2*time.Second) {
		t.Fatalf("blocked apply gave up after %v, want about ApplyTimeout (%v)", took, cfg.ApplyTimeout)
	}
	unblock()
	for i := range 50 { // a fired timer, pooled, must not fire again
		if res, _, err := s.Apply(context.Background(), cmdKVPut, wrapperspb.String("x")); err != nil || res != "ok" {
			t.Fatalf("apply %d after the timeout: %v %v", i, res, err)
		}
	}
	// A caller's own deadline still wins over ApplyTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, _, err := s.Apply(ctx, cmdKVPut, wrapperspb.String("x")); err != nil {
		t.Fatalf("apply with a long deadline: %v", err)
	}
}

// TestStore_ApplyAllocs bounds the allocations of one Apply on the leader
// with a context without deadline, the MAP write path's case: 38 with a
// timer context derived per Apply (more under a MAP connection's context,
// which the derived one registers with), 31 with the pooled timer and
// channel.
func TestStore_ApplyAllocs(t *testing.T) {
	s := NewTestStore(t, newKV())
	ctx := context.Background()
	msg := wrapperspb.String("k=v")
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := s.Apply(ctx, cmdKVPut, msg); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations per Apply (raft, log store and FSM included)", allocs)
	if allocs > 35 {
		t.Errorf("%.0f allocations per Apply, want at most 35", allocs)
	}
}

// TestStore_HasServer: HasServer agrees with Configuration, without a
// context or a waiting goroutine, and says false once shut down.
func TestStore_HasServer(t *testing.T) {
	s := mustNew(t, TestConfig(t, "n1", newKV()))
	ctx := testCtx(t)
	if s.HasServer("n1") {
		t.Fatal("n1 listed before bootstrap")
	}
	if err := s.BootstrapSelf(ctx); err != nil {
		t.Fatal(err)
	}
	servers, err := s.Configuration(ctx)
	if err != nil || len(servers) != 1 || servers[0].ID != "n1" {
		t.Fatalf("configuration %v %v", servers, err)
	}
	for id, want := range map[string]bool{"n1": true, "n2": false, "": false} {
		if got := s.HasServer(id); got != want {
			t.Errorf("HasServer(%q) = %v, want %v", id, got, want)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { s.HasServer("n1") }); allocs > 3 {
		t.Errorf("HasServer: %.0f allocations, want at most 3 (raft's future)", allocs)
	}
	mustShutdown(t, s)
	if s.HasServer("n1") {
		t.Error("HasServer true after shutdown")
	}
}
