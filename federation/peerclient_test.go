package federation

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/concordmap/concord/federation/connclose/stalltest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// stalledH2Server answers the HTTP/2 preface with SETTINGS and then never
// reads: a peer server that froze or was cut off. Plaintext: gRPC's own
// close wait is not TLS's.
func stalledH2Server(t *testing.T) string {
	return stalltest.Peer(t, nil, stalltest.H2Settings())
}

// A link's connection to a peer server that stopped reading closes well
// within gRPC's 5 s wait for its GOAWAY: a link's reconnect and the
// Manager's Close are not held.
func TestPeerClient_CloseStalledServer(t *testing.T) {
	addr := stalledH2Server(t)
	m := &Manager{cfg: Config{Plaintext: true}}
	conn, err := m.dial(&concordv1.FedLink{PeerSystemId: "stalled"}, addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connection to the stalled server: %s", s)
		}
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/concord.test.Stalled/Sink")
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
	time.Sleep(300 * time.Millisecond) // until gRPC's writer is blocked in write(2): nothing to poll
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- conn.Close() }()
	select {
	case <-closed:
		t.Logf("closed in %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Errorf("close toward a stalled server still blocked after 3 s (gRPC waits 5 s for its GOAWAY)")
		<-closed
	}
	<-sent
}
