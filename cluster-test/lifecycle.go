package clustertest

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Node returns node i (0-based, in creation order), whatever its state.
func (c *Cluster) Node(i int) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Nodes returns every node, whatever its state.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Running returns the nodes currently running.
func (c *Cluster) Running() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, n := range c.nodes {
		if n.state == NodeRunning {
			out = append(out, n)
		}
	}
	return out
}

// NodeByID returns the node with the given id, or nil.
func (c *Cluster) NodeByID(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Stop shuts node i down gracefully, keeping its data; peers see it as
// dead (it does not leave gossip). Restart brings it back.
func (c *Cluster) Stop(t testing.TB, i int) {
	t.Helper()
	n := c.Node(i)
	srv := c.takeServer(t, n, NodeStopped)
	c.shutdown(t, n, srv, ShutdownTimeout, false)
}

// Kill stops node i the hard way: it is isolated on the fault network and
// its connections dropped first, so peers see it vanish mid-stream (no
// leadership hand-off, no goodbye), then it is torn down with a short
// budget and rejoins the network rules for a later Restart. Gossip sees it
// as dead, not left. (A real kill -9 is ProcCluster.Kill9.)
func (c *Cluster) Kill(t testing.TB, i int) {
	t.Helper()
	n := c.Node(i)
	c.Net.Isolate(n.ID)
	c.Net.DropConns(n.ID)
	srv := c.takeServer(t, n, NodeKilled)
	c.shutdown(t, n, srv, KillBudget, true)
	c.Net.Rejoin(n.ID)
}

// Restart starts a stopped or killed node i again with its data dir and
// addresses, and waits until it is ready.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	n := c.Node(i)
	if st := n.State(); st != NodeStopped && st != NodeKilled {
		t.Fatalf("clustertest: Restart %s: node is %s", n, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), NodeReadyTimeout+time.Second)
	defer cancel()
	if err := c.start(ctx, n); err != nil {
		t.Fatalf("clustertest: restart %s: %v", n, err)
	}
}

// Remove stops node i, waits until gossip on every running node no longer
// sees it alive, and has the leader remove it from the Raft configuration
// (the operator's "remove peer" after a server is retired). Removing it
// while gossip still sees it alive would be undone: the leader's
// reconciler re-adds alive servers.
func (c *Cluster) Remove(t testing.TB, i int) {
	t.Helper()
	n := c.Node(i)
	if n.State() == NodeRunning {
		c.Stop(t, i)
	}
	Eventually(t, MembershipTimeout, func() error {
		for _, r := range c.Running() {
			members, err := c.Members(r)
			if err != nil {
				return err
			}
			for _, m := range members {
				if m.GetId() == n.ID && m.GetStatus() == concordv1.MemberStatus_MEMBER_STATUS_ALIVE {
					return fmt.Errorf("%s still sees %s alive", r, n)
				}
			}
		}
		return nil
	})
	Eventually(t, MembershipTimeout, func() error {
		l, err := c.agreedLeader(c.Running())
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		return l.Store().RemoveServer(ctx, n.ID)
	})
	c.mu.Lock()
	n.state = NodeRemoved
	c.mu.Unlock()
}

// Leave has node i leave the cluster gracefully (node.Server.Leave: gossip
// leave, then shutdown); the leader's reconciler removes it from the Raft
// configuration.
func (c *Cluster) Leave(t testing.TB, i int) {
	t.Helper()
	n := c.Node(i)
	srv := c.takeServer(t, n, NodeLeft)
	ok := c.watch(t, fmt.Sprintf("leave of %s", n), ShutdownTimeout, func() {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := srv.Leave(ctx); err != nil {
			t.Errorf("clustertest: leave %s: %v", n, err)
		}
	})
	if !ok {
		t.FailNow()
	}
}

// Members asks node n's Cluster gRPC service (Members, the admin RPC the
// CLI uses) for its gossip view. The harness dials it directly, outside
// the fault network.
func (c *Cluster) Members(n *Node) ([]*concordv1.ClusterMember, error) {
	conn, err := adminConn(n.GRPCAddr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	res, err := concordv1.NewClusterClient(conn).Members(ctx, &concordv1.MembersRequest{})
	if err != nil {
		return nil, fmt.Errorf("members of %s: %w", n, err)
	}
	return res.GetMembers(), nil
}

// AddNode starts one more server that joins the running cluster through
// gossip (no bootstrap-expect: the leader's reconciler adds it as a voter)
// and waits until it is ready.
func (c *Cluster) AddNode(t testing.TB) *Node {
	t.Helper()
	c.mu.Lock()
	n := c.newNode(len(c.nodes), 0)
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), NodeReadyTimeout+time.Second)
	defer cancel()
	if err := c.start(ctx, n); err != nil {
		t.Fatalf("clustertest: add %s: %v", n, err)
	}
	return n
}

// takeServer detaches the running server from node n, recording its next
// state.
func (c *Cluster) takeServer(t testing.TB, n *Node, next NodeState) *node.Server {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.state != NodeRunning || n.srv == nil {
		t.Fatalf("clustertest: %s is %s, not running", n, n.state)
	}
	srv := n.srv
	n.srv, n.state = nil, next
	return srv
}

// shutdown stops srv within budget; when hard, errors are expected (the
// node was isolated) and only logged.
func (c *Cluster) shutdown(t testing.TB, n *Node, srv *node.Server, budget time.Duration, hard bool) {
	t.Helper()
	ok := c.watch(t, fmt.Sprintf("shutdown of %s", n), budget+ShutdownTimeout, func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		err := srv.Shutdown(ctx)
		switch {
		case err != nil && hard:
			t.Logf("clustertest: hard stop of %s: %v", n, err)
		case err != nil:
			t.Errorf("clustertest: shutdown %s: %v", n, err)
		}
	})
	if !ok {
		t.FailNow()
	}
}

// Close shuts every running node down concurrently; a watchdog fails the
// test with a goroutine dump if that hangs. It is registered with
// t.Cleanup by New and safe to call more than once.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	var servers []*node.Server
	var names []string
	for _, n := range c.nodes {
		if n.srv != nil {
			servers = append(servers, n.srv)
			names = append(names, n.ID)
			n.srv, n.state = nil, NodeStopped
		}
	}
	c.mu.Unlock()
	if c.observer != nil {
		c.observer.stop()
	}
	c.watch(c.t, "cluster shutdown of "+strings.Join(names, ","), 2*ShutdownTimeout, func() {
		var wg sync.WaitGroup
		for k, srv := range servers {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
				defer cancel()
				if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					c.t.Errorf("clustertest: shutdown %s: %v", names[k], err)
				}
			})
		}
		wg.Wait()
	})
}

// watch runs fn and waits up to budget. When it takes longer, it fails t
// with a dump of every goroutine, then waits as long again for fn (a
// leaked goroutine logging after the test ends would panic); it reports
// whether fn finished within budget.
func (c *Cluster) watch(t testing.TB, what string, budget time.Duration, fn func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(budget):
	}
	t.Errorf("clustertest: %s hangs after %v; goroutines:\n%s", what, budget, goroutineDump())
	select {
	case <-done:
	case <-time.After(budget):
		t.Errorf("clustertest: %s still hangs after %v more; giving up", what, budget)
	}
	return false
}

func goroutineDump() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}

// StartDrain asks node via's Operator service (as concord operator drain
// does, so the call is passed on to node i) to drain node i with timeout
// (0: the node's default); it returns once the drain started. A voter the
// system cannot spare (--min-quorum) is refused: see StartForcedDrain.
func (c *Cluster) StartDrain(t testing.TB, i, via int, timeout time.Duration) *concordv1.OperatorDrainResponse {
	t.Helper()
	res, err := c.Drain(i, via, timeout, false)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	return res
}

// StartForcedDrain is StartDrain with force (concord operator drain
// --force): a voter is drained even below --min-quorum.
func (c *Cluster) StartForcedDrain(t testing.TB, i, via int, timeout time.Duration) *concordv1.OperatorDrainResponse {
	t.Helper()
	res, err := c.Drain(i, via, timeout, true)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	return res
}

// Drain is StartDrain's call, its error returned (a gRPC status).
func (c *Cluster) Drain(i, via int, timeout time.Duration, force bool) (*concordv1.OperatorDrainResponse, error) {
	n, v := c.Node(i), c.Node(via)
	conn, err := adminConn(v.GRPCAddr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	res, err := concordv1.NewOperatorClient(conn).Drain(ctx, &concordv1.OperatorDrainRequest{NodeId: n.ID, TimeoutMs: timeout.Milliseconds(), Force: force})
	if err != nil {
		return nil, fmt.Errorf("drain %s via %s: %w", n, v, err)
	}
	return res, nil
}

// FinishDrain waits (up to budget) until node i, being drained, has left
// the cluster, then shuts it down; it ends NodeLeft.
func (c *Cluster) FinishDrain(t testing.TB, i int, budget time.Duration) {
	t.Helper()
	n := c.Node(i)
	srv := n.Server()
	if srv == nil {
		t.Fatalf("clustertest: %s is not running", n)
	}
	select {
	case <-srv.Drained():
	case <-time.After(budget):
		t.Fatalf("clustertest: %s not drained within %s", n, budget)
	}
	srv = c.takeServer(t, n, NodeLeft)
	c.shutdown(t, n, srv, ShutdownTimeout, false)
}
