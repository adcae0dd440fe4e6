package raftstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"
)

// testCluster is a set of Stores on 127.0.0.1 with their kv modules.
type testCluster struct {
	stores []*Store
	kvs    []*kvModule
}

// clusterConfig is TestConfig with raft's production-like timings: under
// -race on a loaded 2-core machine, 100-300 ms leases expired mid-test.
func clusterConfig(t *testing.T, id string, kv *kvModule) Config {
	cfg := TestConfig(t, id, kv)
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	return cfg
}

// addVoters has the current leader add each store, retrying while
// leadership moves (a slow machine can cost the leader its lease).
func addVoters(t *testing.T, members []*Store, add ...*Store) {
	t.Helper()
	ctx := testCtx(t)
	for _, s := range add {
		eventually(t, waitTimeout, func() error {
			for _, m := range members {
				if m.IsLeader() {
					return m.AddVoter(ctx, s.ID(), s.Addr())
				}
			}
			return errors.New("no leader")
		})
		members = append(members, s)
	}
}

// newTestCluster starts n stores: n1 bootstraps itself and adds the others
// with AddVoter. Every store is shut down at cleanup.
func newTestCluster(t *testing.T, n int, opts ...func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{}
	for i := range n {
		kv := newKV()
		cfg := clusterConfig(t, fmt.Sprintf("n%d", i+1), kv)
		for _, o := range opts {
			o(&cfg)
		}
		s := mustNew(t, cfg)
		t.Cleanup(func() { mustShutdown(t, s) })
		c.stores = append(c.stores, s)
		c.kvs = append(c.kvs, kv)
	}
	ctx := testCtx(t)
	if err := c.stores[0].BootstrapSelf(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.stores[0].WaitLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	addVoters(t, c.stores[:1], c.stores[1:]...)
	c.requireOneLeader(t, c.stores)
	return c
}

// requireOneLeader waits until every store in live agrees on one leader
// among them, and returns it.
func (c *testCluster) requireOneLeader(t *testing.T, live []*Store) *Store {
	t.Helper()
	var leader *Store
	eventually(t, waitTimeout, func() error {
		leader = nil
		for _, s := range live {
			if s.IsLeader() {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.ID(), s.ID())
				}
				leader = s
			}
		}
		if leader == nil {
			return errors.New("no leader")
		}
		for _, s := range live {
			if id, addr := s.Leader(); id != leader.ID() || addr != leader.Addr() {
				return fmt.Errorf("%s thinks the leader is %q at %q, want %s", s.ID(), id, addr, leader.ID())
			}
		}
		return nil
	})
	return leader
}

func (c *testCluster) kvOf(s *Store) *kvModule {
	for i, x := range c.stores {
		if x == s {
			return c.kvs[i]
		}
	}
	return nil
}

func TestCluster_ThreeNodes(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := testCtx(t)
	leader := c.requireOneLeader(t, c.stores)
	var followers []*Store
	for _, s := range c.stores {
		if s != leader {
			followers = append(followers, s)
		}
	}

	servers, err := leader.Configuration(ctx)
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration %+v %v", servers, err)
	}

	// Writes on the leader reach every replica.
	var last uint64
	for i := range 10 {
		res, idx, err := leader.Apply(ctx, cmdKVPut, put(fmt.Sprintf("k%d=v%d", i%3, i)))
		if err != nil {
			t.Fatalf("apply on leader: %v", err)
		}
		if i >= 3 && res != fmt.Sprintf("v%d", i-3) {
			t.Fatalf("result %v", res)
		}
		last = idx
	}
	for _, f := range followers {
		if err := f.WaitApplied(ctx, last); err != nil {
			t.Fatalf("%s wait applied: %v", f.ID(), err)
		}
		if !maps.Equal(c.kvOf(f).snapshotMap(), c.kvOf(leader).snapshotMap()) {
			t.Fatalf("%s diverged", f.ID())
		}
	}

	// Writes and linearizable reads on a follower are refused with the leader's identity.
	for _, f := range followers {
		_, _, err := f.Apply(ctx, cmdKVPut, put("x=1"))
		var nle *NotLeaderError
		if !errors.As(err, &nle) || !errors.Is(err, ErrNotLeader) || nle.LeaderID != leader.ID() || nle.LeaderAddr != leader.Addr() {
			t.Fatalf("apply on follower %s: %v", f.ID(), err)
		}
		if _, _, err := f.ApplyRaw(ctx, encode(cmdKVPut, put("x=1"))); !errors.As(err, &nle) {
			t.Fatalf("raw apply on follower: %v", err)
		}
		if err := f.LinearizableRead(ctx); !errors.As(err, &nle) || nle.LeaderID != leader.ID() {
			t.Fatalf("linearizable read on follower: %v", err)
		}
		if err := f.AddVoter(ctx, "n9", "127.0.0.1:1"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("add voter on follower: %v", err)
		}
		if err := f.LeadershipTransfer(ctx); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("leadership transfer on follower: %v", err)
		}
	}
	if err := leader.LinearizableRead(ctx); err != nil {
		t.Fatalf("linearizable read on leader: %v", err)
	}
}

func TestCluster_LeadershipChangeAndRemove(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := testCtx(t)
	old := c.requireOneLeader(t, c.stores)

	subs := map[*Store]<-chan bool{}
	for _, s := range c.stores {
		ch, cancel := s.SubscribeLeadership()
		t.Cleanup(cancel)
		if got := recv(t, ch, s.ID()+" initial"); got != (s == old) {
			t.Fatalf("%s initial leadership %v", s.ID(), got)
		}
		subs[s] = ch
	}

	eventually(t, waitTimeout, func() error {
		err := old.LeadershipTransfer(ctx)
		if errors.Is(err, ErrNotLeader) && !old.IsLeader() {
			return nil // it moved anyway, which is what this test needs
		}
		return err
	})
	if recv(t, subs[old], "old leader") {
		t.Fatal("old leader was told it leads")
	}
	leader := c.requireOneLeader(t, c.stores)
	if leader == old {
		t.Fatal("leadership did not move")
	}
	if !recv(t, subs[leader], "new leader") {
		t.Fatal("new leader was told it does not lead")
	}

	// The old leader now forwards; the new one accepts writes.
	if _, _, err := old.Apply(ctx, cmdKVPut, put("a=1")); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("apply on old leader: %v", err)
	}
	if _, _, err := leader.Apply(ctx, cmdKVPut, put("a=1")); err != nil {
		t.Fatalf("apply on new leader: %v", err)
	}

	// Remove the old leader; the remaining two keep committing.
	if err := leader.RemoveServer(ctx, old.ID()); err != nil {
		t.Fatalf("remove server: %v", err)
	}
	servers, err := leader.Configuration(ctx)
	if err != nil || len(servers) != 2 {
		t.Fatalf("configuration after remove: %+v %v", servers, err)
	}
	for _, sv := range servers {
		if sv.ID == old.ID() {
			t.Fatal("removed server still in the configuration")
		}
	}
	_, idx, err := leader.Apply(ctx, cmdKVPut, put("b=2"))
	if err != nil {
		t.Fatalf("apply after remove: %v", err)
	}
	for _, s := range c.stores {
		if s != old {
			if err := s.WaitApplied(ctx, idx); err != nil {
				t.Fatalf("%s: %v", s.ID(), err)
			}
		}
	}
	if v, _ := c.kvOf(old).get("b"); v != "" {
		t.Fatal("removed server applied a later write")
	}
}

func TestCluster_LeaderFailover(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := testCtx(t)
	old := c.requireOneLeader(t, c.stores)
	_, idx, err := old.Apply(ctx, cmdKVPut, put("before=1"))
	if err != nil {
		t.Fatal(err)
	}
	var rest []*Store
	for _, s := range c.stores {
		if s != old {
			rest = append(rest, s)
			if err := s.WaitApplied(ctx, idx); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustShutdown(t, old)

	leader := c.requireOneLeader(t, rest)
	if err := leader.LinearizableRead(ctx); err != nil {
		t.Fatalf("linearizable read on new leader: %v", err)
	}
	if v, _ := c.kvOf(leader).get("before"); v != "1" {
		t.Fatal("new leader lost a committed write")
	}
	if _, _, err := leader.Apply(ctx, cmdKVPut, put("after=2")); err != nil {
		t.Fatalf("apply on new leader: %v", err)
	}
}

// directForwarder is a Forwarder that calls the leader's ApplyRaw in
// process, as node's gRPC forwarder does across processes.
type directForwarder struct {
	c     *testCluster
	calls atomic.Int64
}

func (d *directForwarder) Forward(ctx context.Context, leaderID, _ string, cmd []byte) (ForwardReply, error) {
	d.calls.Add(1)
	for _, s := range d.c.stores {
		if s.ID() == leaderID {
			return s.ApplyForwarded(ctx, cmd)
		}
	}
	return ForwardReply{}, ErrNoLeader
}

// newForwardingCluster is newTestCluster with a directForwarder on every
// store; it returns the cluster, its forwarder and the leader.
func newForwardingCluster(t *testing.T, n int, opts ...func(*Config)) (*testCluster, *directForwarder, *Store) {
	t.Helper()
	fwd := &directForwarder{}
	c := newTestCluster(t, n, append([]func(*Config){func(cfg *Config) { cfg.Forwarder = fwd }}, opts...)...)
	fwd.c = c
	return c, fwd, c.requireOneLeader(t, c.stores)
}

func TestCluster_FollowerApplyForwards(t *testing.T) {
	c, fwd, leader := newForwardingCluster(t, 3)
	ctx := testCtx(t)
	for _, f := range c.stores {
		if f == leader {
			continue
		}
		key := f.ID()
		res, idx, err := f.Apply(ctx, cmdKVPut, put(key+"=1"))
		if err != nil || res != "" || idx == 0 {
			t.Fatalf("forwarded put on %s: %v %d %v", f.ID(), res, idx, err)
		}
		res, idx2, err := f.Apply(ctx, cmdKVPut, put(key+"=2"))
		if err != nil || res != "1" || idx2 <= idx {
			t.Fatalf("second forwarded put: %v %d %v", res, idx2, err)
		}
		if v, _ := c.kvOf(f).get(key); v != "2" {
			t.Fatalf("follower state %q", v)
		}
		if got := c.kvOf(leader).at(idx2); got != key+"=2" {
			t.Fatalf("leader holds %q at %d", got, idx2)
		}
		_, idx3, err := f.Apply(ctx, cmdKVDelete, put("missing"))
		var ce *CommandError
		if !errors.Is(err, errKeyNotFound) || !errors.As(err, &ce) || ce.Index != idx3 {
			t.Fatalf("forwarded domain error: %v", err)
		}
		// ApplyRaw never forwards.
		if _, _, err := f.ApplyRaw(ctx, encode(cmdKVPut, put("x=1"))); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("raw apply on follower: %v", err)
		}
	}
	if fwd.calls.Load() != 6 {
		t.Fatalf("%d forwards, want 6", fwd.calls.Load())
	}
	// Results are not kept once no forward is in flight.
	for _, s := range c.stores {
		s.fsm.mu.Lock()
		n := len(s.fsm.results)
		s.fsm.mu.Unlock()
		if n != 0 {
			t.Fatalf("%s keeps %d results", s.ID(), n)
		}
	}
}

// TestCluster_ForwardedWriteSkipsCommitTimeout: a lone write through a
// follower returns once the leader has committed it, not after raft's
// CommitTimeout: the leader's commit nudge carries the commit index to
// the follower at once (nudge.go). Without it every write here would
// take at least the 2 s timeout.
func TestCluster_ForwardedWriteSkipsCommitTimeout(t *testing.T) {
	const commitTimeout = 2 * time.Second
	c, _, leader := newForwardingCluster(t, 3, func(cfg *Config) { cfg.CommitTimeout = commitTimeout })
	ctx := testCtx(t)
	for _, f := range c.stores {
		if f == leader {
			continue
		}
		for i := range 3 {
			// A write left to the commit timeout takes it every time; one
			// a loaded machine slowed (a run saw 1.2 s) does not.
			try := 0
			timingAttempts(t, func() error {
				try++
				start := time.Now()
				_, idx, err := f.Apply(ctx, cmdKVPut, put(fmt.Sprintf("%s=%d.%d", f.ID(), i, try)))
				if err != nil {
					t.Fatalf("forwarded put on %s: %v", f.ID(), err)
				}
				if f.AppliedIndex() < idx {
					t.Fatalf("%s returned before applying %d", f.ID(), idx)
				}
				if took := time.Since(start); took >= commitTimeout/2 {
					return fmt.Errorf("forwarded put on %s took %v (commit timeout %v)", f.ID(), took, commitTimeout)
				}
				return nil
			})
		}
	}
}
