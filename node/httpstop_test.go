package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// A response being written to a client that stopped reading holds the
// HTTP shutdown only httpDrainTimeout, not the whole shutdown budget
// (ctx, 10 s here) that it held before.
func TestShutdownHTTP_FrozenClientCutAfterDrainTimeout(t *testing.T) {
	writing := make(chan struct{})
	handlerDone := make(chan error, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		close(writing)
		var err error
		for i := 0; i < 1<<14 && err == nil; i++ { // 1 GiB: far past any socket buffer
			_, err = w.Write(chunk)
		}
		handlerDone <- err
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	// The frozen client: asks, then never reads.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-writing:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the handler")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	cut, err := shutdownHTTP(ctx, srv, httpDrainTimeout)
	took := time.Since(start)
	if err != nil || !cut {
		t.Fatalf("shutdownHTTP = %v, %v; want the request cut, no error", cut, err)
	}
	if took > httpDrainTimeout+time.Second {
		t.Fatalf("HTTP shutdown took %s with a frozen client, want about %s", took.Round(time.Millisecond), httpDrainTimeout)
	}
	t.Logf("HTTP shutdown took %s with a frozen client", took.Round(time.Millisecond))
	select {
	case err := <-handlerDone:
		if err == nil {
			t.Fatal("the handler wrote its whole response to a client that reads nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still writes after the shutdown")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}
