package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// voters returns the sorted voter ids of the leader's configuration.
func voters(t *testing.T, nd *testNode) ([]string, error) {
	servers, err := nd.store.Configuration(testCtx(t))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range servers {
		if s.Voter {
			ids = append(ids, s.ID)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

func wantVoters(t *testing.T, nd *testNode, want ...string) func() error {
	return func() error {
		got, err := voters(t, nd)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("voters %v, want %v", got, want)
		}
		return nil
	}
}

// TestReconciler_RealCluster runs the reconciler loops of three real
// stores: n1 starts alone and adds n2 and n3 as they appear in gossip;
// when n3 leaves, it is removed and its session detached.
func TestReconciler_RealCluster(t *testing.T) {
	nodes, _ := newTestCluster(t, 3, false)
	fm := newFakeMembers()
	fm.set(membership.Member{ID: "n1", NodeMeta: membership.NodeMeta{RaftAddr: nodes[0].store.Addr()}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, nd := range nodes {
		r, err := NewReconciler(testConfig(t, nd.id), ReconcilerDeps{Store: nd.store, Members: fm, Sessions: nd.reg})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	leader := nodes[0]
	for _, nd := range nodes[1:] {
		fm.set(membership.Member{ID: nd.id, NodeMeta: membership.NodeMeta{RaftAddr: nd.store.Addr()}})
	}
	eventually(t, waitTimeout, wantVoters(t, leader, "n1", "n2", "n3"))

	if _, _, err := leader.store.Apply(testCtx(t), concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s3", "n3")); err != nil {
		t.Fatal(err)
	}
	fm.setStatus("n3", membership.StatusLeft)
	eventually(t, waitTimeout, wantVoters(t, leader, "n1", "n2"))
	eventually(t, waitTimeout, func() error {
		if s, ok := leader.reg.Session("s3"); !ok || s.Connected {
			return fmt.Errorf("session s3 = %+v, want detached", s)
		}
		return nil
	})
}

// TestReconciler_DeadServerCleanup drives single passes with a fake clock:
// a dead voter is removed only after the cleanup delay and only when
// MinQuorum voters remain.
func TestReconciler_DeadServerCleanup(t *testing.T) {
	nodes, _ := newTestCluster(t, 2, false)
	leader := nodes[0]
	if err := leader.store.AddVoter(testCtx(t), "n2", nodes[1].store.Addr()); err != nil {
		t.Fatal(err)
	}
	fm := newFakeMembers()
	fm.set(membership.Member{ID: "n1", NodeMeta: membership.NodeMeta{RaftAddr: leader.store.Addr()}})
	fm.set(membership.Member{ID: "n2", Status: membership.StatusDead, NodeMeta: membership.NodeMeta{RaftAddr: nodes[1].store.Addr()}})
	now := time.Now()
	newRec := func(minQuorum int) *Reconciler {
		cfg := testConfig(t, "n1")
		cfg.MinQuorum = minQuorum
		cfg.DeadServerCleanupDelay = time.Minute
		cfg.Now = func() time.Time { return now }
		r, err := NewReconciler(cfg, ReconcilerDeps{Store: leader.store, Members: fm})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx := testCtx(t)

	strict := newRec(2)
	strict.pass(ctx) // first sight of n2 dead
	now = now.Add(2 * time.Minute)
	strict.pass(ctx)
	if err := wantVoters(t, leader, "n1", "n2")(); err != nil {
		t.Fatalf("MinQuorum 2: %v", err)
	}

	lax := newRec(1)
	lax.pass(ctx) // this reconciler sees n2 dead from now on
	now = now.Add(30 * time.Second)
	lax.pass(ctx)
	if err := wantVoters(t, leader, "n1", "n2")(); err != nil {
		t.Fatalf("before the delay: %v", err)
	}
	now = now.Add(31 * time.Second)
	lax.pass(ctx)
	if err := wantVoters(t, leader, "n1")(); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
}

// rejoinMembers is a MemberLister whose first answer is the pass's view
// and every later one the re-check's: it reproduces a node that gossip
// declared failed and that rejoined between the pass's view and its
// SESSION_DETACH (the false "member failed" under load).
type rejoinMembers struct {
	mu            sync.Mutex
	calls         int
	first, recent []membership.Member
}

func (f *rejoinMembers) Members() []membership.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls == 1 {
		return f.first
	}
	return f.recent
}

// TestReconciler_DetachRechecksLiveness: the detach of a failed node's
// session re-reads gossip right before proposing, so a node that came
// back keeps its sessions, while one still dead loses them.
func TestReconciler_DetachRechecksLiveness(t *testing.T) {
	for _, tc := range []struct {
		name         string
		later        membership.Status
		wantAttached bool
	}{
		{"rejoined before the detach", membership.StatusAlive, true},
		{"still failed", membership.StatusDead, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, _ := newTestCluster(t, 1, false)
			leader := nodes[0]
			ctx := testCtx(t)
			if _, _, err := leader.store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s2", "n2")); err != nil {
				t.Fatal(err)
			}
			self := membership.Member{ID: "n1", Status: membership.StatusAlive,
				NodeMeta: membership.NodeMeta{Role: membership.RoleServer, RaftAddr: leader.store.Addr()}}
			n2 := membership.Member{ID: "n2", Status: membership.StatusDead} // not a server: no Raft action
			later := n2
			later.Status = tc.later
			fm := &rejoinMembers{first: []membership.Member{self, n2}, recent: []membership.Member{self, later}}
			cfg := testConfig(t, "n1")
			cfg.SessionDetachGrace = 0 // one pass: the grace is TestPlan_SessionDetachGrace's
			r, err := NewReconciler(cfg, ReconcilerDeps{Store: leader.store, Members: fm, Sessions: leader.reg})
			if err != nil {
				t.Fatal(err)
			}
			r.pass(ctx)
			s, ok := leader.reg.Session("s2")
			if !ok || s.Connected != tc.wantAttached {
				t.Fatalf("session after the pass: %+v (found %v), want connected=%v", s, ok, tc.wantAttached)
			}
		})
	}
}

// TestReconciler_DetachAfterGrace: the session of a node that stays failed
// is detached once SessionDetachGrace has passed, not before, and the loop
// wakes for it by itself (the interval is an hour and no membership change
// arrives).
func TestReconciler_DetachAfterGrace(t *testing.T) {
	const grace = 500 * time.Millisecond
	nodes, _ := newTestCluster(t, 1, false)
	leader := nodes[0]
	ctx := testCtx(t)
	if _, _, err := leader.store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, openSession("s2", "n2")); err != nil {
		t.Fatal(err)
	}
	fm := newFakeMembers()
	fm.set(membership.Member{ID: "n1", Status: membership.StatusAlive,
		NodeMeta: membership.NodeMeta{Role: membership.RoleServer, RaftAddr: leader.store.Addr()}})
	// n2 is a configured non-voter (a server the configuration no longer
	// held would be detached at once), kept there by a long cleanup delay.
	if err := leader.store.AddNonvoter(ctx, "n2", "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	fm.set(membership.Member{ID: "n2", Status: membership.StatusDead, NodeMeta: membership.NodeMeta{RaftAddr: "127.0.0.1:1"}})
	cfg := testConfig(t, "n1")
	cfg.ReconcileInterval = time.Hour
	cfg.DeadServerCleanupDelay = time.Hour
	cfg.SessionDetachGrace = grace
	r, err := NewReconciler(cfg, ReconcilerDeps{Store: leader.store, Members: fm, Sessions: leader.reg})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	eventually(t, 5*time.Second, func() error {
		if s, ok := leader.reg.Session("s2"); !ok || s.Connected {
			return fmt.Errorf("session s2 still attached: %+v", s)
		}
		return nil
	})
	if took := time.Since(start); took < grace {
		t.Fatalf("detached after %s, before the grace of %s", took, grace)
	}
}
