package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// SETTINGS{INITIAL_WINDOW_SIZE: 2^31-1}, then WINDOW_UPDATE on the
	// connection by as much.
	const window = 1<<31 - 1
	frames := []byte{0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x4}
	frames = binary.BigEndian.AppendUint32(frames, window)
	frames = append(frames, 0, 0, 4, 0x8, 0, 0, 0, 0, 0)
	frames = binary.BigEndian.AppendUint32(frames, window-65535)
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
			tc := tls.Server(c, cfg)
			_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
			if tc.Handshake() == nil {
				_, _ = tc.Write(frames)
			}
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
