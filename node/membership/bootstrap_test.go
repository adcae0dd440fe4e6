package membership

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// waitAll calls WaitBootstrapExpect on every node concurrently and returns
// each node's chosen ids.
func waitAll(t *testing.T, nodes []*Membership) [][]string {
	t.Helper()
	ctx := ctxTimeout(t, 15*time.Second)
	got := make([][]string, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, m := range nodes {
		wg.Go(func() {
			ms, err := m.WaitBootstrapExpect(ctx)
			got[i], errs[i] = memberIDs(ms), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWaitBootstrapExpect_SameSetOnEveryNode(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	for _, n := range []int{1, 3, 5} {
		order := r.Perm(n)
		t.Run(fmt.Sprintf("n=%d/order=%v", n, order), func(t *testing.T) {
			ids := nodeIDs(n)
			nodes := startCluster(t, ids, order, func(c *Config) { c.BootstrapExpect = n })
			for i, got := range waitAll(t, nodes) {
				if !slices.Equal(got, ids) {
					t.Errorf("%s chose %v, want %v", ids[i], got, ids)
				}
			}
		})
	}
}

// A node configured with a different bootstrap-expect is not counted, so it
// cannot slip into (or stall) the set the others agree on.
func TestWaitBootstrapExpect_IgnoresMismatchedExpect(t *testing.T) {
	ids := nodeIDs(4) // n01 is the odd one out and has the lowest id
	nodes := startCluster(t, ids, []int{3, 0, 2, 1}, func(c *Config) {
		c.BootstrapExpect = 3
		if c.NodeID == "n01" {
			c.BootstrapExpect = 5
		}
	})
	for _, m := range nodes {
		eventually(t, 10*time.Second, func() error { return seesAlive(m, ids) })
	}
	want := ids[1:]
	for i, got := range waitAll(t, nodes[1:]) {
		if !slices.Equal(got, want) {
			t.Errorf("%s chose %v, want %v", ids[i+1], got, want)
		}
	}
}

func TestWaitBootstrapExpect_Errors(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.BootstrapExpect = 2
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitBootstrapExpect(t.Context()); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("before Start = %v, want ErrNotStarted", err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Alone, a node expecting two servers waits until its context ends.
	ctx := ctxTimeout(t, 200*time.Millisecond)
	if _, err := m.WaitBootstrapExpect(ctx); !errors.Is(err, ctx.Err()) || ctx.Err() == nil {
		t.Fatalf("alone = %v, want the context's error", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.WaitBootstrapExpect(t.Context())
		done <- err
	}()
	if err := m.Shutdown(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("interrupted by Shutdown = %v, want ErrShutdown", err)
		}
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("WaitBootstrapExpect not released by Shutdown")
	}
}

// Once any member advertises Raft state the cluster exists: nodes still
// waiting must stand down rather than bootstrap a second configuration.
func TestWaitBootstrapExpect_StandsDownOnceBootstrapped(t *testing.T) {
	ids := nodeIDs(3)
	nodes := startCluster(t, ids, []int{0, 1, 2}, func(c *Config) { c.BootstrapExpect = 5 })
	for _, m := range nodes {
		eventually(t, 10*time.Second, func() error { return seesAlive(m, ids) })
	}
	done := make(chan error, 2)
	for _, m := range nodes[1:] { // expecting 5 of 3: they wait
		go func() {
			_, err := m.WaitBootstrapExpect(ctxTimeout(t, 10*time.Second))
			done <- err
		}()
	}
	if err := nodes[0].SetBootstrapped(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("SetBootstrapped: %v", err)
	}
	for range 2 {
		if err := <-done; !errors.Is(err, ErrAlreadyBootstrapped) {
			t.Fatalf("waiting node got %v, want ErrAlreadyBootstrapped", err)
		}
	}
	if !nodes[0].LocalMember().Bootstrapped {
		t.Fatal("local member does not show the flag")
	}
}

func TestWaitBootstrapExpect_LocalStateBeforeStart(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.BootstrapExpect = 1
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	if err := m.SetBootstrapped(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitBootstrapExpect(t.Context()); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("got %v, want ErrAlreadyBootstrapped", err)
	}
	if !m.LocalMember().Bootstrapped {
		t.Fatal("flag set before Start not advertised")
	}
}
