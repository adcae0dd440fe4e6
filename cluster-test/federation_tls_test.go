package clustertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestFederation_OverMTLS links two TLS systems (each its own CA, no
// plaintext links): the token carries the issuer's CA, every stream is
// mutual TLS verified against the link's CA, and a message crosses. A
// node presenting a certificate for dc2 from another CA is refused, and
// it reaches nothing else either.
func TestFederation_OverMTLS(t *testing.T) {
	net := NewNetwork(t, nil)
	tlsOnly := WithNodeConfig(func(_ int, c *node.Config) {
		c.Federation.Plaintext = false
		c.HTTPTLS = false // MAP clients of two CAs: keep the test's MAP side plain
	})
	dc1 := New(t, 1, WithSystem("dc1"), WithSharedNetwork(net), tlsOnly)
	dc2 := New(t, 1, WithSystem("dc2"), WithSharedNetwork(net), tlsOnly)
	Link(t, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	Eventually(t, 10*time.Second, func() error { return dc2.LinkUp("dc1") })
	for _, st := range dc1.Node(0).Server().Federation().Status() {
		if len(st.GetLink().GetPeerCaPem()) == 0 {
			t.Fatal("the link holds no peer CA")
		}
	}
	alice := agentOn(t, dc1, 0, "alice", nil)
	bob := agentOn(t, dc2, 0, "bob", nil)
	Eventually(t, 5*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": "over mTLS"})
		if err != nil || !slices.Equal(res.Delivered, []string{"dc2:agent:bob"}) {
			return fmt.Errorf("send over mTLS: %v %s", res, Describe(err))
		}
		return nil
	})
	if _, err := bob.WaitMessages(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// A certificate naming dc2 from a CA that is not dc2's.
	forged, err := tlstest.ForeignCA("dc2").IssueServer(pki.ServerRequest{SystemID: "dc2", NodeID: "dc2-n1"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // the attacker does not care who answers
	conn, err := grpc.NewClient(dc1.Node(0).GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	// A direct stream (to the server holding target agents) is checked
	// like the main one; so is a genuine certificate of another system
	// (dc3, its own CA) claiming dc2.
	dc3 := tlstest.Server("dc3", "dc3-n1")
	dc3Pair, err := tls.X509KeyPair(dc3.CertPEM, dc3.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	dc3Cfg := &tls.Config{Certificates: []tls.Certificate{dc3Pair}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // as above
	dc3Conn, err := grpc.NewClient(dc1.Node(0).GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(dc3Cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc3Conn.Close()
	for _, tc := range []struct {
		name   string
		conn   *grpc.ClientConn
		direct bool
	}{
		{"forged certificate, main stream", conn, false},
		{"forged certificate, direct stream", conn, true},
		{"dc3's certificate claiming dc2, direct stream", dc3Conn, true},
	} {
		st, err := concordv1.NewFederationClient(tc.conn).Link(ctx)
		if err == nil {
			_ = st.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Hello{Hello: &concordv1.FedHello{SystemId: "dc2", NodeId: "dc2-n1", Direct: tc.direct}}})
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: got %v, want Unauthenticated", tc.name, err)
		}
	}
	if n := dc1.Node(0).Server().Federation().Status()[0].GetDirectReceived(); n != 0 {
		t.Fatalf("refused streams delivered %d envelopes", n)
	}
	// Nor may a certificate of another system call anything else.
	if _, err := concordv1.NewClusterClient(conn).Members(ctx, &concordv1.MembersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forged certificate: Members answered %v, want PermissionDenied", err)
	}
}
