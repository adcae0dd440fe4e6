package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestSecurity_StrangerWithGossipAccessNeverVotes: gossip is authenticated
// by the gossip key alone (here plaintext, as if the key had leaked), so a
// stranger can join it; with a certificate of another CA it must never be
// added to Raft. A legitimate server joining after it is added (the
// control, and proof that a reconcile pass ran with the stranger in view).
func TestSecurity_StrangerWithGossipAccessNeverVotes(t *testing.T) {
	servers := startCluster(t, 3)
	leader := agreedLeader(t, servers)
	seeds := []string{leader.GossipAddr()}

	fca := tlstest.ForeignCA("dev")
	sp, err := fca.IssueServer(pki.ServerRequest{SystemID: "dev", NodeID: "n4"})
	if err != nil {
		t.Fatal(err)
	}
	stranger := clusterNodeConfig(t, "n4", "127.0.0.1:0", seeds, 0)
	stranger.TLS = tlsconf.Config{CAPEM: fca.CertPEM, CertPEM: sp.CertPEM, KeyPEM: sp.KeyPEM}
	stranger.ReadyTimeout = 3 * time.Second // it never becomes ready
	startBackground(t, stranger)
	waitMember(t, leader, "n4")

	startBackground(t, clusterNodeConfig(t, "n5", "127.0.0.1:0", seeds, 0))
	deadline := time.Now().Add(20 * time.Second)
	for {
		ids := voterIDs(t, leader)
		if slices.Contains(ids, "n4") {
			t.Fatalf("the stranger became a voter: %v", ids)
		}
		if slices.Contains(ids, "n5") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n5 never became a voter: %v", ids)
		}
		time.Sleep(25 * time.Millisecond) // polling the configuration; no event for it
	}
}

// startBackground builds a node from c and starts it on a goroutine owned
// by the test (its Start may fail: a stranger never gets ready).
func startBackground(t *testing.T, c node.Config) {
	t.Helper()
	srv, err := node.New(c)
	if err != nil {
		t.Fatalf("new %s: %v", c.NodeID, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		_ = srv.Start(ctx)
	}()
	t.Cleanup(func() { <-done; _ = srv.Shutdown(context.Background()) })
}

func waitMember(t *testing.T, s *node.Server, id string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	cc, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tlstest.ClientTLS("dev", "alice"))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	alive := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := concordv1.NewClusterClient(cc).Members(ctx, &concordv1.MembersRequest{})
		for _, m := range res.GetMembers() {
			if err == nil && m.GetId() == id && m.GetStatus() == concordv1.MemberStatus_MEMBER_STATUS_ALIVE {
				return true
			}
		}
		return false
	}
	for !alive() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never joined gossip", id)
		}
		time.Sleep(25 * time.Millisecond) // polling gossip; no event for it here
	}
}

func voterIDs(t *testing.T, s *node.Server) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	servers, err := s.Store().Configuration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sv := range servers {
		ids = append(ids, sv.ID)
	}
	return ids
}
