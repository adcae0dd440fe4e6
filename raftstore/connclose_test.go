package raftstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// closeBound is how long a close toward a peer that reads nothing may
// take here: a liveness bound, well under crypto/tls's 5 s close_notify
// write deadline that closing such a connection used to wait out.
const closeBound = 2 * time.Second

// testTLS returns a server and a client config for one self-signed
// loopback certificate.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "raftstore test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}}
	client = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	return server, client
}

// tlsLayer is TCP under TLS, as node's raft stream layer is.
type tlsLayer struct {
	raft.StreamLayer
	server, client *tls.Config
}

func (l *tlsLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

func (l *tlsLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.client)
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}

func newTLSLayer(t *testing.T) *tlsLayer {
	t.Helper()
	tcp, err := newTCPStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	server, client := testTLS(t)
	return &tlsLayer{StreamLayer: tcp, server: server, client: client}
}

// stuckTLSPeer returns the address of a TLS listener that completes each
// handshake and then reads nothing, as a peer behind a partition that
// keeps the TCP connection open.
func stuckTLSPeer(t *testing.T, server *tls.Config) raft.ServerAddress {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				tc := tls.Server(c, server)
				_ = tc.SetDeadline(time.Now().Add(waitTimeout))
				_ = tc.Handshake() // then never read again
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return raft.ServerAddress(ln.Addr().String())
}

// fillSendBuffer writes to conn's socket, under any TLS layer (the peer
// reads nothing, so the bytes need not make sense), until not even one
// more byte fits: then a close_notify would block on it.
func fillSendBuffer(t *testing.T, conn net.Conn) {
	t.Helper()
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tc.NetConn()
	}
	defer func() { _ = conn.SetWriteDeadline(time.Time{}) }()
	deadline := time.Now().Add(waitTimeout)
	for _, size := range []int{64 << 10, 4 << 10, 256, 16, 1} { // each size fills what the last left
		chunk := make([]byte, size)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("the send buffer did not fill within %s", waitTimeout)
			}
			_ = conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := conn.Write(chunk)
			if err == nil {
				continue
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("fill the send buffer: %v", err)
			}
			break
		}
	}
}

// promptly runs f and fails the test unless it returns within closeBound.
func promptly(t *testing.T, what string, f func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), closeBound)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		<-done // no goroutine outlives the test
		t.Fatalf("%s: still closing after %s toward a peer that reads nothing", what, closeBound)
	}
}

// Resetting or shutting down the append sender closes its connections
// promptly even toward a peer that keeps TCP open and reads nothing: an
// RPC waiting for its answer with the send buffer full, and an idle
// connection likewise, each of which TLS's close_notify would hold 5 s.
func TestAppendSender_CloseConnsPromptTowardStuckPeer(t *testing.T) {
	layer := newTLSLayer(t)
	t.Cleanup(func() { _ = layer.Close() })
	stuck := stuckTLSPeer(t, layer.server)
	s := newAppendSender(layer, 10*time.Second, 2, newEntryCache(false))
	t.Cleanup(func() { s.closeConns(true) })

	open := func() *sendConn {
		c, err := s.get(stuck)
		if err != nil {
			t.Fatal(err)
		}
		fillSendBuffer(t, c.conn)
		return c
	}
	inUse := open()
	promptly(t, "reset with an RPC in flight", func() { s.closeConns(false) })
	if _, err := inUse.conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the in-flight connection is still open after the reset")
	}

	open() // in use
	s.put(open())
	promptly(t, "shutdown with a connection idle and one in use", func() { s.closeConns(true) })
	if _, err := s.get(stuck); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("get after shutdown: %v, want ErrTransportShutdown", err)
	}
}

// The transport's layer closes the connections raft dialled and those it
// accepted promptly toward a peer that reads nothing: raft closes dialled
// ones on its own goroutines (pools, pipelines, CloseStreams), and
// Store.Shutdown waits for the accepted ones' handlers.
func TestTrackingLayer_ClosePromptTowardStuckPeer(t *testing.T) {
	inner := newTLSLayer(t)
	layer := newTrackingLayer(inner, newDialSet())
	t.Cleanup(func() { _ = layer.Close() })

	// Dialled, as raft's pool and pipelines dial.
	dialled, err := layer.Dial(stuckTLSPeer(t, inner.server), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fillSendBuffer(t, dialled)
	promptly(t, "closing a dialled connection", func() { _ = dialled.Close() })

	// Accepted from a peer that handshakes and then reads nothing.
	raw, err := net.Dial("tcp", layer.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	peer := tls.Client(raw, inner.client)
	handshaken := make(chan error, 1)
	go func() { handshaken <- peer.Handshake() }()
	accepted, err := layer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := accepted.(*trackedConn).Conn.(*tls.Conn).Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, handshaken, "the peer's handshake"); err != nil {
		t.Fatal(err)
	}
	fillSendBuffer(t, accepted)
	promptly(t, "closing the layer with an accepted connection open", func() { _ = layer.Close() })
	promptly(t, "the handler closing its connection", func() { _ = accepted.Close() })
	promptly(t, "waiting for the handlers", layer.handlers().Wait)
}
