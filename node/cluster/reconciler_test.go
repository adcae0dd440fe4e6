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
