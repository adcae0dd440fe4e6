package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
)

// laggingLayer is a raft.StreamLayer on loopback TCP whose accepted
// connections hand each read over delay late, while delay > 0: the node's
// replica then learns of commits late (the leader's AppendEntries arrive
// late), but its gRPC forwards to the leader are as fast as ever.
type laggingLayer struct {
	net.Listener
	delay *atomic.Int64
}

func (l laggingLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return laggingConn{Conn: c, delay: l.delay}, nil
}

func (l laggingLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

type laggingConn struct {
	net.Conn
	delay *atomic.Int64
}

func (c laggingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if d := time.Duration(c.delay.Load()); d > 0 && n > 0 {
		time.Sleep(d)
	}
	return n, err
}

// laggingFollower starts a 3-node cluster and returns a follower whose
// Raft traffic arrives 80 ms late (laggingLayer).
func laggingFollower(t *testing.T) *node.Server {
	t.Helper()
	delays := make([]*atomic.Int64, 3)
	servers := startCluster(t, 3, func(i int, c *node.Config) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		delays[i] = &atomic.Int64{}
		c.RaftAddr = ln.Addr().String()
		c.Raft.StreamLayer = laggingLayer{Listener: ln, delay: delays[i]}
		// Twice the cluster tests' timings: every read of the lagging
		// follower's Raft traffic waits 80 ms, and on a loaded machine
		// (-race, CI beside other work) that ate the 500 ms lease: the
		// leader stepped down mid-test and connects answered 4000.
		c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout, c.Raft.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	})
	leader := agreedLeader(t, servers)
	follower := followersOf(servers, leader)[0]
	for i, s := range servers {
		if s == follower {
			delays[i].Store(int64(80 * time.Millisecond))
		}
	}
	return follower
}

// TestCluster_ReadYourWritesThroughLaggingFollower: a follower answers a
// forwarded write with the leader's result as soon as the leader commits
// it, before its own replica applied it. Here the follower's replica lags
// by design (its Raft traffic arrives 80 ms late), so a read on the same
// connection, or on another connection to that node, right after the
// write sees the write only because the node's fence makes it wait for
// the local apply. It fails without the fence (node/mapsvc/fence.go).
func TestCluster_ReadYourWritesThroughLaggingFollower(t *testing.T) {
	follower := laggingFollower(t)

	c := dial(t, follower)
	c.mustCallAvailable("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	other := dial(t, follower)
	other.mustCallAvailable("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
	c.mustCallAvailable("map/agents/register", map[string]any{"agentId": "ryw"})
	// Reading the agent right after registering it: its owner sees it.
	if got := agentOf(t, c.mustCallAvailable("map/agents/get", map[string]any{"agentId": "ryw"})); got.ID != "ryw" {
		t.Fatalf("agents/get after register: %+v", got)
	}
	lagged := 0
	for i := range 5 {
		c.mustCallAvailable("map/agents/update", map[string]any{"agentId": "ryw", "metadata": map[string]any{"n": i}})
		if a, ok := follower.Registry().Agent("ryw"); ok && string(a.Metadata) != fmt.Sprintf(`{"n":%d}`, i) {
			lagged++ // the answer came before this replica applied the write
		}
		reader, which := c, "the same connection"
		if i%2 == 1 {
			reader, which = other, "another connection"
		}
		got := agentOf(t, reader.mustCallAvailable("map/agents/get", map[string]any{"agentId": "ryw"}))
		if want := fmt.Sprintf(`{"n":%d}`, i); string(got.Metadata) != want {
			t.Fatalf("write %d: agents/get on %s saw metadata %s, want %s", i, which, got.Metadata, want)
		}
		c.mustCallAvailable("map/scopes/create", map[string]any{"scopeId": fmt.Sprintf("ryw-%d", i)})
		sc := c.mustCallAvailable("map/scopes/get", map[string]any{"scopeId": fmt.Sprintf("ryw-%d", i)})
		if s, _ := sc["scope"].(map[string]any); s == nil || s["id"] != fmt.Sprintf("ryw-%d", i) {
			t.Fatalf("scopes/get after scopes/create: %v", sc)
		}
	}
	if lagged == 0 {
		t.Fatal("the follower never answered before its own apply: the test does not exercise the fence")
	}
}

type agentView struct {
	ID       string          `json:"id"`
	Metadata json.RawMessage `json:"metadata"`
}

func agentOf(t *testing.T, res map[string]any) agentView {
	t.Helper()
	b, err := json.Marshal(res["agent"])
	if err != nil {
		t.Fatal(err)
	}
	var a agentView
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestCluster_ConnectsThroughLaggingFollower: a fresh map/connect does not
// wait for the fresh sessions its node answered before it (fence.go,
// writeFreshSession), yet whatever reads sessions still sees them through
// a lagging follower: a resume of a session answered a moment ago on a new
// connection, and a connect that names a participant id another session
// on this node holds.
func TestCluster_ConnectsThroughLaggingFollower(t *testing.T) {
	follower := laggingFollower(t)

	// A burst of fresh connects, each answered with the leader's result.
	const burst = 8
	results := make([]map[string]any, burst)
	errs := make([]error, burst)
	var wg sync.WaitGroup
	for i := range burst {
		c := dial(t, follower)
		wg.Go(func() { // no t.Fatal off the test's goroutine: errors are checked below
			results[i], errs[i] = c.callAvailable("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("burst of connects through the lagging follower: %v", err)
	}
	lagged := 0
	for _, r := range results {
		if _, ok := follower.Registry().Session(r["sessionId"].(string)); !ok {
			lagged++
		}
	}

	// Resume the last of them on a new connection to the same node.
	last := results[burst-1]
	res := dial(t, follower).mustCallAvailable("map/connect", map[string]any{
		"protocolVersion": 1, "participantType": "client",
		"sessionId": last["sessionId"], "resumeToken": last["resumeToken"],
	})
	if res["reconnected"] != true || res["sessionId"] != last["sessionId"] {
		t.Fatalf("resume through the lagging follower: want reconnected session %v, got %v", last["sessionId"], res)
	}

	// A participant id held by a session this node just answered.
	held := dial(t, follower).mustCallAvailable("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "ryw-p"})
	if _, ok := follower.Registry().Session(held["sessionId"].(string)); !ok {
		lagged++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := dial(t, follower).conn.Call(ctx, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "ryw-p"})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeAuthFailed {
		t.Fatalf("second connect as ryw-p through the lagging follower: got %v, want error %d (held)", err, rpc.CodeAuthFailed)
	}
	if lagged == 0 {
		t.Fatal("the follower never answered a connect before its own apply: the test does not exercise the fence")
	}
}

// callAvailable is call for a cluster that a loaded machine may leave
// without a leader for a moment: an answer 4000 "Cluster unavailable,
// retry" is retried, as a MAP client would, for up to 30 s; any other
// error is returned. It never fails the test itself, so it may run on
// any goroutine.
func (c *client) callAvailable(method string, params any) (map[string]any, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		raw, err := c.conn.Call(ctx, method, params)
		cancel()
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeExhausted && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // a client's retry pause
			continue
		}
		if err != nil {
			if re != nil && re.Data != nil {
				return nil, fmt.Errorf("%s: %w (details %v)", method, err, re.Data.Details)
			}
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("%s: decode result %s: %w", method, raw, err)
		}
		return out, nil
	}
}

// mustCallAvailable is callAvailable on the test's goroutine.
func (c *client) mustCallAvailable(method string, params any) map[string]any {
	c.t.Helper()
	out, err := c.callAvailable(method, params)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}
