package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// stalledWSClient opens a wss connection to url with a small receive
// buffer, sends one notification (so the handler sees the connection) and
// then never reads: a client that froze or was cut off.
func stalledWSClient(t *testing.T, url string) {
	t.Helper()
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
			}
			return c, err
		},
		TLSClientConfig:  &tls.Config{InsecureSkipVerify: true}, // httptest's certificate
		HandshakeTimeout: testTimeout,
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ws, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.NetConn().(*tls.Conn).NetConn().Close() })
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","method":"note"}`)); err != nil {
		t.Fatal(err)
	}
}

// A wss connection whose client stopped reading ends promptly once a
// write times out: the server's close does not wait crypto/tls's 5 s for
// a close_notify the full socket buffer cannot take.
func TestWS_StalledTLSClientClosesPromptly(t *testing.T) {
	cfg := testConfig(t)
	cfg.WriteTimeout = 300 * time.Millisecond
	h := newTestHandler()
	s, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s)
	hs.Listener = &smallSendBuffers{hs.Listener}
	hs.StartTLS()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	})
	stalledWSClient(t, "wss"+strings.TrimPrefix(hs.URL, "https")+"/map")
	c := recvConn(t, h.conns)

	start := time.Now()
	payload := map[string]string{"pad": strings.Repeat("x", 8<<10)}
	for c.Notify("x-test/fill", payload) == nil && time.Since(start) < testTimeout {
	}
	// The write times out after WriteTimeout; the close that follows
	// must not add crypto/tls's 5 s.
	select {
	case <-c.Done():
		t.Logf("connection ended %s after the client stalled", time.Since(start).Round(time.Millisecond))
	case <-time.After(cfg.WriteTimeout + 3*time.Second):
		t.Errorf("connection to a stalled client still open %s after it stalled (crypto/tls holds a close_notify 5 s)",
			time.Since(start).Round(time.Millisecond))
		<-c.Done()
	}
}

// smallSendBuffers shrinks the send buffer of accepted connections, so
// the socket toward a stalled client fills after a few writes.
type smallSendBuffers struct{ net.Listener }

func (l *smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// A server's Shutdown does not wait WriteTimeout (10 s, the default) for
// a client that stopped reading with frames queued to it: its goodbye
// gets shutdownGoodbyeGrace, then the socket is cut. A client that reads
// still gets its queued frames and the close frame (lifecycle tests).
func TestServer_ShutdownPromptWithStalledClient(t *testing.T) {
	cfg := testConfig(t)
	cfg.WriteTimeout = 10 * time.Second
	h := newTestHandler()
	s, err := NewServer(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s)
	hs.Listener = &smallSendBuffers{hs.Listener}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	stalledWSClient(t, "wss"+strings.TrimPrefix(hs.URL, "https")+"/map")
	c := recvConn(t, h.conns)
	payload := map[string]string{"pad": strings.Repeat("x", 8<<10)}
	for start := time.Now(); c.Notify("x-test/fill", payload) == nil; {
		if time.Since(start) > testTimeout {
			t.Fatal("the stalled client's queue never filled")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	took := time.Since(start)
	t.Logf("shut down in %s with a stalled client", took.Round(time.Millisecond))
	if bound := shutdownGoodbyeGrace + 2*time.Second; took > bound {
		t.Fatalf("Shutdown took %s with a stalled client, want under %s", took.Round(time.Millisecond), bound)
	}
}
