package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// testNode is one node of an in-process cluster: a real raftstore Store
// with the registry module, its Forwarder and its cluster Server.
type testNode struct {
	id    string
	store *raftstore.Store
	reg   *registry.State
	fwd   *Forwarder
	srv   *runningServer
}

// newTestCluster starts n nodes on 127.0.0.1 sharing one resolver (node id
// → gRPC address). With bootstrapAll every store is bootstrapped with the
// full list; otherwise only n1 bootstraps itself (the others wait to be
// added). Everything is shut down at cleanup: servers, then stores, then
// forwarders.
func newTestCluster(t *testing.T, n int, bootstrapAll bool) ([]*testNode, *staticResolver) {
	t.Helper()
	return newTestClusterWith(t, n, bootstrapAll, nil, nil)
}

// newTestClusterWith is newTestCluster with every node's Config and
// raftstore.Config changed by mod and rmod (each when not nil).
func newTestClusterWith(t testing.TB, n int, bootstrapAll bool, mod func(*Config), rmod func(*raftstore.Config)) ([]*testNode, *staticResolver) {
	t.Helper()
	res := newResolver()
	var nodes []*testNode
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		nd := &testNode{id: id}
		reg, err := registry.New(registry.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		nd.reg = reg
		cfg := testConfig(t, id)
		if mod != nil {
			mod(&cfg)
		}
		if nd.fwd, err = NewForwarder(cfg, res); err != nil {
			t.Fatal(err)
		}
		fwd := nd.fwd
		t.Cleanup(func() { _ = fwd.Close() })
		rcfg := raftstore.TestConfig(t, id, reg)
		// Timings that tolerate three nodes under -race on a loaded host:
		// cluster-test's 300 ms (FastConfig). At 100 ms a loaded run saw a
		// leadership transfer time out (raft allows it one election
		// timeout) and leaders come and go under the tests' feet.
		rcfg.HeartbeatTimeout, rcfg.ElectionTimeout, rcfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
		rcfg.Forwarder = nd.fwd
		if rmod != nil {
			rmod(&rcfg)
		}
		if nd.store, err = raftstore.New(rcfg); err != nil {
			t.Fatal(err)
		}
		st := nd.store
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), scaled(10*time.Second))
			defer cancel()
			if err := st.Shutdown(ctx); err != nil {
				t.Errorf("store %s shutdown: %v", id, err)
			}
		})
		nd.fwd.SetLeaderSource(nd.store)
		nd.srv = startServer(t, cfg, ServerDeps{Store: nd.store, Resolver: res}, nil)
		res.set(id, nd.srv.addr)
		nodes = append(nodes, nd)
	}
	ctx := testCtx(t)
	if bootstrapAll {
		var servers []raftstore.Server
		for _, nd := range nodes {
			servers = append(servers, raftstore.Server{ID: nd.id, Address: nd.store.Addr(), Voter: true})
		}
		for _, nd := range nodes {
			if err := nd.store.BootstrapCluster(ctx, servers); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		if err := nodes[0].store.BootstrapSelf(ctx); err != nil {
			t.Fatal(err)
		}
		if err := nodes[0].store.WaitLeadership(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, res
}

// leaderOf waits until all nodes agree on one leader and returns it and
// the followers.
func leaderOf(t testing.TB, nodes []*testNode) (*testNode, []*testNode) {
	t.Helper()
	var leader *testNode
	var followers []*testNode
	eventually(t, waitTimeout, func() error {
		leader, followers = nil, nil
		for _, nd := range nodes {
			if nd.store.IsLeader() {
				if leader != nil {
					return errors.New("two leaders")
				}
				leader = nd
			} else {
				followers = append(followers, nd)
			}
		}
		if leader == nil {
			return errors.New("no leader")
		}
		for _, nd := range nodes {
			if id, _ := nd.store.Leader(); id != leader.id {
				return fmt.Errorf("%s sees leader %q, want %s", nd.id, id, leader.id)
			}
		}
		return nil
	})
	return leader, followers
}

// openSession is a SESSION_OPEN command for session id homed on node.
func openSession(id, node string) *concordv1.SessionOpenRequest {
	return &concordv1.SessionOpenRequest{
		Meta: &concordv1.CommandMeta{TimestampMs: time.Now().UnixMilli(), NodeId: node, EventIds: []string{ulid.Make().String()}},
		Session: &concordv1.SessionRecord{
			Id: id, ParticipantId: "p-" + id, ParticipantType: "agent", HomeNode: node,
			DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: registry.BehaviorOrphan},
		},
	}
}

// encode is a command as it goes into the Raft log.
func encode(t testing.TB, ct concordv1.CommandType, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{byte(ct)}, b...)
}
