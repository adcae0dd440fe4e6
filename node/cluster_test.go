package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/raftstore/testlog"
)

// startCluster starts n nodes that find each other by gossip and bootstrap
// Raft together (bootstrap-expect), started concurrently. Each mut changes
// node i's config before it is built.
//
// Every node's gossip address must be known before any starts (they are
// each other's seeds), so it is reserved and released, then bound by the
// node; on a busy host another process can take the port in between. A
// node whose gossip bind fails that way is replaced at once by one on a
// port memberlist picks itself: it joins the others through their
// addresses, while they wait for it in bootstrap-expect.
func startCluster(t *testing.T, n int, mut ...func(i int, c *node.Config)) []*node.Server {
	t.Helper()
	seeds := make([]string, n)
	for i := range seeds {
		seeds[i] = freeGossipAddr(t)
	}
	build := func(i int, gossipAddr string) *node.Server {
		c := clusterNodeConfig(t, fmt.Sprintf("n%d", i+1), gossipAddr, seeds, n)
		for _, m := range mut {
			m(i, &c)
		}
		srv, err := node.New(c)
		if err != nil {
			t.Fatalf("new %s: %v", c.NodeID, err)
		}
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		return srv
	}
	type result struct {
		i   int
		err error
	}
	// Buffered for every node: a starter never blocks, even if the test
	// goroutine fails while building a replacement.
	results := make(chan result, n)
	start := func(i int, srv *node.Server) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			results <- result{i, srv.Start(ctx)}
		}()
	}
	servers := make([]*node.Server, n)
	for i := range servers {
		servers[i] = build(i, seeds[i])
	}
	for i, srv := range servers {
		start(i, srv)
	}
	const maxReplacements = 3
	replaced := 0
	errs := make([]error, n)
	for pending := n; pending > 0; {
		r := <-results
		if gossipPortTaken(r.err) && replaced < maxReplacements {
			replaced++
			t.Logf("n%d: gossip port taken before it bound (%v); replacing it with a node on a port of its own choosing", r.i+1, r.err)
			_ = servers[r.i].Shutdown(context.Background())
			servers[r.i] = build(r.i, "127.0.0.1:0")
			start(r.i, servers[r.i])
			continue
		}
		pending--
		if r.err != nil {
			errs[r.i] = fmt.Errorf("start n%d: %w", r.i+1, r.err)
		}
	}
	// Every node's error: one that cannot start leaves the others waiting
	// for it, and theirs alone would hide why.
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return servers
}

// gossipPortTaken reports whether a node's Start failed binding its gossip
// port because something else holds it. memberlist formats the listen
// error with %v, so errors.Is cannot see the errno; its text can.
func gossipPortTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "start membership") &&
		strings.Contains(err.Error(), syscall.EADDRINUSE.Error())
}

func TestCluster_FormsForwardsAndRoutes(t *testing.T) {
	servers := startCluster(t, 3)
	leader := agreedLeader(t, servers)
	followers := followersOf(servers, leader)
	follower1, follower2 := followers[0], followers[1]
	// Agents on the two followers: registration is forwarded to the leader.
	a := dial(t, follower1)
	a.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	a.call("map/agents/register", map[string]any{"agentId": "alice"})
	inbox := make(chan json.RawMessage, 4)
	b := dialWith(t, follower2, notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/message" {
			inbox <- params
		}
	}))
	b.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	b.call("map/agents/register", map[string]any{"agentId": "bob"})

	// Sends resolve against the local replica: wait until alice's node has
	// applied bob's registration.
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := follower1.Registry().Agent("bob"); !ok; _, ok = follower1.Registry().Agent("bob") {
		if time.Now().After(deadline) {
			t.Fatal("bob's registration never reached alice's node")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res := a.call("map/send", map[string]any{"to": map[string]any{"agent": "bob"}, "payload": map[string]any{"hi": 1}})
	if d, _ := res["delivered"].([]any); len(d) != 1 || d[0] != "bob" {
		t.Fatalf("cross-node send: %v", res)
	}
	select {
	case m := <-inbox:
		var got struct{ Message struct{ From string } }
		_ = json.Unmarshal(m, &got)
		if got.Message.From != "alice" {
			t.Fatalf("message from %q: %s", got.Message.From, m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("bob never received the message")
	}
}

// A node whose reserved gossip port another process took before it bound
// it is replaced, and the cluster still forms with every node.
func TestStartCluster_ReplacesNodeWhoseGossipPortWasTaken(t *testing.T) {
	var taken net.Listener
	servers := startCluster(t, 3, func(i int, c *node.Config) {
		if i != 0 || taken != nil {
			return
		}
		ln, err := net.Listen("tcp", c.GossipAddr) // the other process
		if err != nil {
			t.Fatalf("take n1's gossip port: %v", err)
		}
		taken = ln
		t.Cleanup(func() { _ = ln.Close() })
	})
	if got := servers[0].GossipAddr(); got == taken.Addr().String() {
		t.Fatalf("n1 gossips on the taken port %s", got)
	}
	agreedLeader(t, servers)
	for _, s := range servers {
		if n := len(voterIDs(t, s)); n != 3 {
			t.Fatalf("%s sees %d voters, want 3", s.GossipAddr(), n)
		}
	}
}

// clusterNodeConfig is a TLS node of a test cluster: gossip on gossipAddr,
// joining seeds, bootstrapping with expect servers (0: joins a formed one).
func clusterNodeConfig(t *testing.T, id, gossipAddr string, seeds []string, expect int) node.Config {
	c := node.DevConfig(t.TempDir())
	c.NodeID = id
	secure(&c)
	c.Bootstrap = false
	c.BootstrapExpect = expect
	c.GossipAddr = gossipAddr
	c.Join = seeds
	c.Membership.Timings = membership.TestTimings()
	c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout = 500*time.Millisecond, 500*time.Millisecond
	c.Raft.LeaderLeaseTimeout = 500 * time.Millisecond
	c.ReadyTimeout = 20 * time.Second
	c.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", c.NodeID)
	return c
}

// agreedLeader waits until every node names the same leader.
func agreedLeader(t *testing.T, servers []*node.Server) *node.Server {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		id, _ := servers[0].Store().Leader()
		agreed := id != ""
		var leader *node.Server
		for _, s := range servers {
			if got, _ := s.Store().Leader(); got != id {
				agreed = false
			}
			if s.Store().IsLeader() {
				leader = s
			}
		}
		if agreed && leader != nil {
			return leader
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("nodes never agreed on a leader")
	return nil
}

// freeGossipAddr finds a loopback port free for both TCP and UDP, as
// memberlist binds both, for a node whose address others must know before
// it starts. It is released here and bound later by the node, so another
// process may take it first: startCluster replaces such a node. A node
// nobody seeds from takes "127.0.0.1:0" instead.
func freeGossipAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr
		}
	}
	t.Fatal("no free gossip port")
	return ""
}

// notifyFunc adapts a function to rpc.Handler for inbound notifications.
type notifyFunc func(method string, params json.RawMessage)

func (f notifyFunc) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	f(req.Method, req.Params)
	return nil, nil
}
func (f notifyFunc) Closed(*rpc.Conn) {}
