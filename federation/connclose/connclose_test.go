package connclose

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
	"os"
	"testing"
	"time"

	"github.com/concordmap/concord/federation/connclose/stalltest"
	"go.uber.org/goleak"
	"google.golang.org/grpc/credentials"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// promptBound is how long a close toward a stalled peer may take here:
// well under crypto/tls's 5 s and gRPC's 5 s GOAWAY wait, well above
// Grace on a loaded machine.
const promptBound = 2 * time.Second

// testTLS returns a server and a client config trusting one self-signed
// certificate for 127.0.0.1.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "connclose test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"h2"}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}

// stalledPeer completes the TLS handshake of each connection and then
// never reads again (stalltest.Peer).
func stalledPeer(t *testing.T, cfg *tls.Config) string {
	return stalltest.Peer(t, cfg, nil)
}

// dialSmall dials addr with a small send buffer.
func dialSmall(t *testing.T, addr string) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.(*net.TCPConn).SetWriteBuffer(4 << 10)
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// fill writes to c until a write times out: the socket buffers toward the
// stalled peer are full and no write is in flight (the state in which
// crypto/tls's close_notify waits its 5 s).
func fill(t *testing.T, c net.Conn) {
	t.Helper()
	chunk := make([]byte, 16<<10)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write(chunk); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			t.Fatalf("fill: %v", err)
		}
	}
	t.Fatal("fill: the peer's buffers never filled")
}

// within runs fn and fails the test unless it returns within bound.
func within(t *testing.T, what string, bound time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); fn() }()
	select {
	case <-done:
		t.Logf("%s took %s", what, time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		t.Errorf("%s still blocked after %s (crypto/tls holds a close_notify 5 s)", what, bound)
		<-done
	}
}

func stalledTLSConn(t *testing.T) (*tls.Conn, net.Conn) {
	srv, cli := testTLS(t)
	raw := dialSmall(t, stalledPeer(t, srv))
	tc := tls.Client(raw, cli)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetDeadline(time.Time{})
	fill(t, tc)
	return tc, raw
}

// The stall is real: crypto/tls's own Close does not return within a
// second (it would take 5); the test then cuts the socket itself.
func TestStalledPeerHoldsTLSClose(t *testing.T) {
	tc, raw := stalledTLSConn(t)
	done := make(chan struct{})
	go func() { defer close(done); _ = tc.Close() }()
	select {
	case <-done:
		t.Fatal("tls.Conn.Close returned at once toward a stalled peer: the test setup no longer stalls")
	case <-time.After(time.Second):
	}
	_ = raw.Close()
	<-done
}

// Close toward a peer that stopped reading, its buffers full, returns
// within the grace, not crypto/tls's 5 s.
func TestClose_StalledPeer(t *testing.T) {
	tc, _ := stalledTLSConn(t)
	within(t, "Close", promptBound, func() {
		if err := Close(tc, Grace); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// Toward a peer that reads, Close still says goodbye: the peer reads
// close_notify (io.EOF), not a bare end of the socket.
func TestClose_SendsCloseNotify(t *testing.T) {
	srv, cli := testTLS(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		got <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := Close(c, Grace); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-got; err == nil || err.Error() != "EOF" {
		t.Fatalf("peer read %v, want EOF (close_notify)", err)
	}
}

// A connection made by Credentials closes promptly toward a stalled peer,
// and Abort ends a write blocked on one.
func TestCredentials_StalledPeer(t *testing.T) {
	srv, cli := testTLS(t)
	addr := stalledPeer(t, srv)
	creds := NewCredentials(credentials.NewTLS(cli))
	handshake := func() net.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := creds.ClientHandshake(ctx, "127.0.0.1", dialSmall(t, addr))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := handshake()
	fill(t, c)
	within(t, "Close of a Credentials connection", promptBound, func() { _ = c.Close() })

	c = handshake()
	blocked := make(chan error, 1)
	go func() { // a writer with no deadline, as gRPC's
		var err error
		for err == nil {
			_, err = c.Write(make([]byte, 16<<10))
		}
		blocked <- err
	}()
	select {
	case err := <-blocked:
		t.Fatalf("write toward a stalled peer ended by itself: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	within(t, "Abort of a blocked write", promptBound, func() {
		creds.Abort()
		<-blocked
	})
	_ = c.Close()
	creds.mu.Lock()
	n := len(creds.raws)
	creds.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d sockets still tracked after their close", n)
	}
}

// CloseWithin aborts a close that does not return within the grace, and
// does not when it does.
func TestCloseWithin(t *testing.T) {
	release := make(chan struct{})
	aborted := false
	err := CloseWithin(func() error { <-release; return os.ErrClosed }, 10*time.Millisecond, func() { aborted = true; close(release) })
	if !aborted || !errors.Is(err, os.ErrClosed) {
		t.Fatalf("blocked close: aborted %v, err %v", aborted, err)
	}
	aborted = false
	if err := CloseWithin(func() error { return nil }, time.Minute, func() { aborted = true }); err != nil || aborted {
		t.Fatalf("quick close: aborted %v, err %v", aborted, err)
	}
}
