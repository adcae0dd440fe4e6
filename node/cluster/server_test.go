package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// client dials a Cluster service for a test.
func client(t *testing.T, addr string) concordv1.ClusterClient {
	t.Helper()
	return concordv1.NewClusterClient(dialTest(t, addr))
}

// dialTest dials a test server, closed at cleanup.
func dialTest(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func TestServer_AdminOnRealCluster(t *testing.T) {
	nodes, _ := newTestCluster(t, 3, true)
	leader, followers := leaderOf(t, nodes)
	ctx := testCtx(t)
	c := client(t, followers[0].srv.addr)

	peers, err := c.RaftPeers(ctx, &concordv1.RaftPeersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, p := range peers.GetPeers() {
		if p.GetSuffrage() != concordv1.RaftSuffrage_RAFT_SUFFRAGE_VOTER || p.GetAddress() == "" {
			t.Fatalf("peer %v: want a voter with an address", p)
		}
		if p.GetLeader() {
			leaders++
			if p.GetId() != leader.id {
				t.Fatalf("leader flag on %s, want %s", p.GetId(), leader.id)
			}
		}
	}
	if len(peers.GetPeers()) != 3 || leaders != 1 {
		t.Fatalf("RaftPeers = %v, want 3 voters and one leader", peers.GetPeers())
	}

	st, err := c.Status(ctx, &concordv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetNodeId() != followers[0].id || st.GetLeaderId() != leader.id || st.GetVoters() != 3 ||
		st.GetRaftState() != "Follower" && st.GetRaftState() != "follower" || len(st.GetRaftStats()) == 0 {
		t.Fatalf("Status = %v", st)
	}

	if _, err := c.RemovePeer(ctx, &concordv1.RemovePeerRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RemovePeer without id = %v, want InvalidArgument", err)
	}
	// Asked on a follower, the removal is passed to the leader.
	victim := followers[1].id
	if _, err := c.RemovePeer(ctx, &concordv1.RemovePeerRequest{Id: victim}); err != nil {
		t.Fatalf("RemovePeer via follower: %v", err)
	}
	eventually(t, waitTimeout, func() error {
		servers, err := leader.store.Configuration(ctx)
		if err != nil {
			return err
		}
		for _, s := range servers {
			if s.ID == victim {
				return fmt.Errorf("%s still in %v", victim, servers)
			}
		}
		return nil
	})
}

func TestServer_Members(t *testing.T) {
	fm := newFakeMembers()
	fm.set(membership.Member{ID: "n1", SystemID: "sys", NodeMeta: membership.NodeMeta{GRPCAddr: "g1", RaftAddr: "r1", Version: "v"}})
	fm.set(membership.Member{ID: "n2", Status: membership.StatusDead})
	srv := startServer(t, testConfig(t, "n1"), ServerDeps{Store: &fakeStore{id: "n1"}, Members: fm}, nil)
	resp, err := client(t, srv.addr).Members(testCtx(t), &concordv1.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*concordv1.ClusterMember{}
	for _, m := range resp.GetMembers() {
		got[m.GetId()] = m
	}
	if m := got["n1"]; m == nil || m.GetGrpcAddress() != "g1" || m.GetRaftAddress() != "r1" || m.GetSystemId() != "sys" ||
		m.GetStatus() != concordv1.MemberStatus_MEMBER_STATUS_ALIVE || m.GetRole() != "server" {
		t.Fatalf("n1 = %v", m)
	}
	if m := got["n2"]; m == nil || m.GetStatus() != concordv1.MemberStatus_MEMBER_STATUS_DEAD {
		t.Fatalf("n2 = %v", m)
	}
}

// TestServer_GracefulShutdownWithOpenRelayStream: a peer's long-lived
// relay stream must not hold a graceful shutdown until its deadline.
func TestServer_GracefulShutdownWithOpenRelayStream(t *testing.T) {
	p := newRelayPair(t, nil)
	if err := p.relay.Send(testCtx(t), "b", envelope("x", mapMsg("m"))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scaled(5*time.Second))
	defer cancel()
	start := time.Now()
	if err := p.srvB.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	mustBeWithin(t, start, 2500*time.Millisecond, "graceful shutdown with an idle relay stream") // not the 5 s deadline
	if err := p.srvB.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

// TestServer_HardStopWhenContextEnds: a Forward that does not finish makes
// Shutdown stop hard at its deadline.
func TestServer_HardStopWhenContextEnds(t *testing.T) {
	fs := &fakeStore{id: "L", block: make(chan struct{})}
	defer close(fs.block)
	srv := startServer(t, testConfig(t, "L"), ServerDeps{Store: fs}, nil)
	c := client(t, srv.addr)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Forward(context.Background(), &concordv1.ForwardRequest{Command: []byte{1}})
		errs <- err
	}()
	eventually(t, 5*time.Second, func() error {
		if fs.calls.Load() == 0 {
			return errors.New("forward not in progress")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	mustBeWithin(t, start, 3*time.Second, "hard stop") // not waiting for the Forward, which never ends
	srv.once.Do(func() {                               // stopped here; the cleanup need not (its error is expected)
		if err := <-srv.served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	if err := <-errs; err == nil {
		t.Fatal("the cut-off Forward succeeded")
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default with node id", func(*Config) {}, true},
		{"no node id", func(c *Config) { c.NodeID = "" }, false},
		{"batch larger than window", func(c *Config) { c.RelayMaxInFlight = c.RelayMaxBatch - 1 }, false},
		{"message size below two batches", func(c *Config) { c.MaxMessageSize = c.RelayMaxBatchBytes }, false},
		{"zero queue", func(c *Config) { c.RelayQueueSize = 0 }, false},
		{"zero delivery timeout", func(c *Config) { c.RelayDeliveryTimeout = 0 }, false},
		{"backoff above its cap", func(c *Config) { c.ForwardBackoff = c.ForwardMaxBackoff + 1 }, false},
		{"min quorum zero", func(c *Config) { c.MinQuorum = 0 }, false},
		{"negative cleanup delay", func(c *Config) { c.DeadServerCleanupDelay = -1 }, false},
		{"no session detach grace", func(c *Config) { c.SessionDetachGrace = 0 }, true},
		{"negative session detach grace", func(c *Config) { c.SessionDetachGrace = -1 }, false},
		{"no forward stream queue", func(c *Config) { c.ForwardStreamQueue = 0 }, false},
		{"forward batch bytes above half a message", func(c *Config) { c.ForwardStreamMaxBatchBytes = c.MaxMessageSize/2 + 1 }, false},
		{"no forward stream idle timeout", func(c *Config) { c.ForwardStreamIdleTimeout = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.NodeID = "n1"
			tc.mod(&c)
			err := c.Validate()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if _, err := NewPeerStreams(testConfig(t, "a"), nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewPeerStreams without resolver = %v", err)
	}
	if _, err := NewServer(testConfig(t, "a"), ServerDeps{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewServer without store = %v", err)
	}
}
