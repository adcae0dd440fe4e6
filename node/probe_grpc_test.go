package node_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// grpcCaller is one way of reaching the node's gRPC port (cluster and
// federation services): who the caller is and what TLS it speaks.
type grpcCaller struct {
	name string
	tls  *tls.Config // nil: plaintext
	// handshake false: the TLS handshake itself must fail.
	handshake bool
}

func grpcCallers(t *testing.T) []grpcCaller {
	// withCert trusts this system's CA and presents certPEM/keyPEM.
	withCert := func(certPEM, keyPEM []byte) *tls.Config {
		cfg := tlstest.ClientTLS("dev", "")
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		return cfg
	}
	dc9 := tlstest.Server("dc9", "n1")
	// A certificate naming a node of this system, from an attacker's own CA.
	pair, err := tlstest.ForeignCA("dev").IssueServer(pki.ServerRequest{SystemID: "dev", NodeID: "dev-2"})
	if err != nil {
		t.Fatal(err)
	}
	return []grpcCaller{
		{name: "no client certificate", tls: tlstest.ClientTLS("dev", ""), handshake: true},
		{name: "server certificate of an unlinked system", tls: withCert(dc9.CertPEM, dc9.KeyPEM), handshake: true},
		// Not verified, so it counts as no certificate (anonymous).
		{name: "forged certificate of a member", tls: withCert(pair.CertPEM, pair.KeyPEM), handshake: true},
		{name: "plaintext", tls: nil, handshake: false},
	}
}

// TestProbe_GRPCUnauthenticated calls the federation and cluster services
// as callers that are neither members nor linked systems: every call is
// refused with an auth status (or the handshake fails), nothing changes,
// and the node keeps serving.
func TestProbe_GRPCUnauthenticated(t *testing.T) {
	srv := startProbeNode(t, nil)
	for _, c := range grpcCallers(t) {
		t.Run(c.name, func(t *testing.T) {
			before := markState(srv)
			links := len(srv.Federation().State().Links())
			creds := insecure.NewCredentials()
			if c.tls != nil {
				creds = credentials.NewTLS(c.tls)
			}
			cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			fed := concordv1.NewFederationClient(cc)
			calls := map[string]func() error{
				"Peer with a bogus token": func() error {
					_, err := fed.Peer(ctx, &concordv1.PeerRequest{Secret: []byte("bogus"), SystemId: "dc9", Addrs: []string{"127.0.0.1:1"}})
					return err
				},
				"PeerUnlink": func() error {
					_, err := fed.PeerUnlink(ctx, &concordv1.PeerUnlinkRequest{SystemId: "dc9"})
					return err
				},
				"CreateToken": func() error {
					_, err := fed.CreateToken(ctx, &concordv1.CreateTokenRequest{})
					return err
				},
				"CreateMapLink": func() error {
					_, err := fed.CreateMapLink(ctx, &concordv1.CreateMapLinkRequest{})
					return err
				},
				"MapForward": func() error {
					_, err := fed.MapForward(ctx, &concordv1.MapForwardRequest{})
					return err
				},
				"OutboxRelay": func() error {
					_, err := fed.OutboxRelay(ctx, &concordv1.OutboxRelayRequest{})
					return err
				},
				"Link hello from dc9":           func() error { return linkHello(ctx, fed, "dc9") },
				"Link hello naming this system": func() error { return linkHello(ctx, fed, "dev") },
			}
			for name, call := range calls {
				err := call()
				code := status.Code(err)
				switch {
				case !c.handshake && code == codes.Unavailable:
					// the connection never came up: refused at TLS
				case c.handshake && (code == codes.Unauthenticated || code == codes.PermissionDenied ||
					code == codes.InvalidArgument || code == codes.NotFound):
				default:
					t.Errorf("%s: want a refusal, got %v", name, err)
				}
			}
			checkUnchanged(t, srv, before)
			if n := len(srv.Federation().State().Links()); n != links {
				t.Fatalf("federation links changed: %d -> %d", links, n)
			}
		})
	}
	ws := dialProbe(t, srv)
	ws.connectAgent()
	ws.mustCall("map/agents/list", map[string]any{})
}

// linkHello opens a Link stream, says hello as system and returns the
// stream's error.
func linkHello(ctx context.Context, fed concordv1.FederationClient, system string) error {
	st, err := fed.Link(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Hello{Hello: &concordv1.FedHello{SystemId: system, NodeId: "n1"}}}); err != nil && err != io.EOF {
		return err
	}
	_, err = st.Recv()
	return err
}

// TestProbe_GRPCGarbage writes bytes that are not HTTP/2 to the gRPC
// port, in plaintext and inside TLS: the node closes the connection and
// keeps serving members and MAP clients.
func TestProbe_GRPCGarbage(t *testing.T) {
	srv := startProbeNode(t, nil)
	garbage := []byte("GET / HTTP/1.1\r\n\r\n\x00\xff\xfe PRI * garbage\r\n\r\n")
	t.Run("plaintext", func(t *testing.T) {
		c, err := net.Dial("tcp", srv.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(garbage)
		expectClosed(t, c)
	})
	t.Run("inside TLS", func(t *testing.T) {
		cfg := tlstest.ClientTLS("dev", "")
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", srv.GRPCAddr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(garbage)
		expectClosed(t, c)
	})
	t.Run("half a TLS hello", func(t *testing.T) {
		c, err := net.Dial("tcp", srv.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a record that never completes
		expectClosed(t, c)
	})
	checkNodeServes(t, srv)
}

// checkNodeServes opens a MAP session and makes one call.
func checkNodeServes(t *testing.T, srv *node.Server) {
	t.Helper()
	ws := dialProbe(t, srv)
	ws.connectAgent()
	ws.mustCall("map/agents/list", map[string]any{})
}
