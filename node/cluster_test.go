package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/rpc"
)

// startCluster starts n nodes that find each other by gossip and bootstrap
// Raft together (bootstrap-expect), started concurrently. Each mut changes
// node i's config before it is built.
func startCluster(t *testing.T, n int, mut ...func(i int, c *node.Config)) []*node.Server {
	t.Helper()
	servers := make([]*node.Server, n)
	cfgs := make([]node.Config, n)
	seeds := make([]string, n)
	for i := range seeds {
		seeds[i] = freeGossipAddr(t)
	}
	for i := range cfgs {
		c := clusterNodeConfig(t, fmt.Sprintf("n%d", i+1), seeds[i], seeds, n)
		for _, m := range mut {
			m(i, &c)
		}
		srv, err := node.New(c)
		if err != nil {
			t.Fatalf("new %s: %v", c.NodeID, err)
		}
		servers[i], cfgs[i] = srv, c
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			errs[i] = srv.Start(ctx)
		}()
	}
	wg.Wait()
	// Every node's error: one that cannot start (a gossip port taken
	// between freeGossipAddr and the bind, on a busy host) leaves the
	// others waiting for it, and theirs alone would hide why.
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("start n%d: %w", i+1, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return servers
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
// memberlist binds both; the tiny race with other processes is acceptable
// in tests.
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
