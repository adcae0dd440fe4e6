package cluster

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/concordmap/concord/federation/connclose/stalltest"
	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// stalledH2Peer is a TLS server that answers the HTTP/2 connection
// preface with SETTINGS (a window large enough that flow control never
// stops the client) and then never reads: a frozen or partitioned peer
// whose socket buffers fill. It returns its address; its connections
// close when the test ends.
func stalledH2Peer(t *testing.T) string {
	t.Helper()
	m, err := tlsconf.New(tlstest.Server("pooltest", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.ServerConfig("grpc", tlsconf.ClientAuthRequest, tlsconf.Expect{})
	cfg.NextProtos = []string{"h2"}
	return stalltest.Peer(t, cfg, stalltest.H2Settings())
}

// Closing the pool while a stream is blocked writing to a peer that
// stopped reading returns well within gRPC's 5 s GOAWAY wait (and TLS's
// 5 s close_notify): the sockets are cut after connclose.Grace.
func TestPool_CloseStalledPeer(t *testing.T) {
	addr := stalledH2Peer(t)
	cfg := DefaultConfig()
	cfg.PeerCredentials = func(string) credentials.TransportCredentials {
		return credentials.NewTLS(tlstest.ClientTLS("pooltest", ""))
	}
	p := newPool(cfg)
	cc, err := p.get("n2", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if !waitReady(ctx, cc, waitTimeout) {
		t.Fatalf("connection to the stalled peer not ready: %s", cc.GetState())
	}
	stream, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/concord.test.Stalled/Sink")
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	go func() { // ends when the close fails the stream
		defer close(sent)
		msg := wrapperspb.Bytes(make([]byte, 64<<10))
		for stream.SendMsg(msg) == nil {
		}
	}()
	// Until the socket buffers are full and gRPC's writer is blocked.
	time.Sleep(300 * time.Millisecond) // no state to poll: the writer is inside write(2)
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- p.close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
		t.Logf("pool closed in %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Errorf("pool close toward a stalled peer still blocked after 3 s (gRPC waits 5 s for its GOAWAY)")
		<-closed
	}
	<-sent
	if s := cc.GetState(); s != connectivity.Shutdown {
		t.Fatalf("connection %s after the pool closed", s)
	}
}
