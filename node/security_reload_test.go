package node_test

import (
	"context"
	"crypto/tls"
	"math/big"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// servedSerial handshakes with addr (ALPN proto) and returns the serial of
// the certificate the server presents.
func servedSerial(t *testing.T, addr, proto string) *big.Int {
	t.Helper()
	cfg := tlstest.ClientTLS("dev", "alice")
	cfg.NextProtos = []string{proto}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestSecurity_ReloadWhileTrafficFlows rotates the node's certificate
// (what SIGHUP does: ReloadTLS) while a MAP client keeps calling over an
// established wss:// connection: the connection keeps working, and new
// handshakes on the HTTP and gRPC ports present the new certificate. A
// reload with a certificate for another node is refused and changes
// nothing.
func TestSecurity_ReloadWhileTrafficFlows(t *testing.T) {
	files, err := tlstest.Files(t.TempDir(), tlstest.Server("dev", "dev-1"))
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := startSecureNode(t, func(c *node.Config) { c.TLS = files })
	old := servedSerial(t, srv.HTTPAddr(), "http/1.1")

	c := dial(t, srv)
	c.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
	var calls, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := c.conn.Call(ctx, "map/agents/list", nil); err != nil {
				failures.Add(1)
			}
			cancel()
			calls.Add(1)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	issue := func(nodeID string) {
		p, err := tlstest.CA("dev").IssueServer(pki.ServerRequest{SystemID: "dev", NodeID: nodeID})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files.CertFile, p.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files.KeyFile, p.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	issue("dev-1")
	if err := srv.ReloadTLS(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	renewed := servedSerial(t, srv.HTTPAddr(), "http/1.1")
	if renewed.Cmp(old) == 0 {
		t.Fatal("HTTP port still presents the old certificate after reload")
	}
	if got := servedSerial(t, srv.GRPCAddr(), "h2"); got.Cmp(renewed) != 0 {
		t.Fatalf("gRPC port presents serial %v, want the new %v", got, renewed)
	}

	issue("dev-2") // not this node's: refused, the renewed one stays
	if err := srv.ReloadTLS(); err == nil {
		t.Fatal("reload with another node's certificate succeeded")
	}
	if got := servedSerial(t, srv.HTTPAddr(), "http/1.1"); got.Cmp(renewed) != 0 {
		t.Fatalf("after a refused reload the port presents %v, want %v", got, renewed)
	}

	// The established connection carried traffic across both reloads.
	before := calls.Load()
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < before+10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // let the caller goroutine run
	}
	if calls.Load() < before+10 || failures.Load() != 0 {
		t.Fatalf("traffic over the old connection: %d calls (%d after the reloads), %d failures", calls.Load(), calls.Load()-before, failures.Load())
	}
	// And a new MAP client connects with the new certificate.
	dial(t, srv).call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
}
