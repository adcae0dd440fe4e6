package federation

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// stalledH2Server answers the HTTP/2 preface with SETTINGS (a window that
// never stops the client) and then never reads: a peer server that froze
// or was cut off, its socket buffers filling. Plaintext: gRPC's own close
// wait is not TLS's.
func stalledH2Server(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const window = 1<<31 - 1
	frames := binary.BigEndian.AppendUint32([]byte{0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x4}, window)
	frames = binary.BigEndian.AppendUint32(append(frames, 0, 0, 4, 0x8, 0, 0, 0, 0, 0), window-65535)
	conns := make(chan net.Conn, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
			conns <- c
			_, _ = c.Write(frames)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
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
