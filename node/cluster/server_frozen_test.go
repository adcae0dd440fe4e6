package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// frozenH2Client opens an HTTP/2 connection to addr as a gRPC peer does
// (preface, empty SETTINGS), reads the server's first frame header so
// the server surely serves it, and then reads nothing more: a peer that
// froze (SIGSTOP) with its connection open. Closed at cleanup.
func frozenH2Client(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	hello := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 0x4, 0, 0, 0, 0, 0)
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadFull(c, make([]byte, 9)); err != nil {
		t.Fatalf("the server's SETTINGS: %v", err)
	}
}

// A graceful stop does not wait for a peer that froze with its
// connection open: GracefulStop waits for each connection to close, and
// gRPC closes an idle one only after the peer acknowledged its GOAWAY's
// ping or 5 s passed. Once no RPC is running, Shutdown gives the peers
// connclose.Grace to go and then closes the rest.
func TestServer_ShutdownPromptWithFrozenPeer(t *testing.T) {
	srv := startServer(t, testConfig(t, "n1"), ServerDeps{Store: &fakeStore{id: "n1"}, Members: newFakeMembers()}, nil)
	// A healthy peer too, with an RPC done, whose connection stays open.
	if _, err := client(t, srv.addr).Members(testCtx(t), &concordv1.MembersRequest{}); err != nil {
		t.Fatal(err)
	}
	frozenH2Client(t, srv.addr)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("shut down in %s with a frozen peer", time.Since(start).Round(time.Millisecond))
	mustBeWithin(t, start, 2*time.Second, "graceful shutdown with a frozen peer connected")
}

// An RPC in progress is still waited for (until ctx): the cut applies
// only once no handler runs.
func TestServer_ShutdownWaitsForRPCWithFrozenPeer(t *testing.T) {
	fs := &fakeStore{id: "L", block: make(chan struct{})}
	srv := startServer(t, testConfig(t, "L"), ServerDeps{Store: fs}, nil)
	frozenH2Client(t, srv.addr)
	c := client(t, srv.addr)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Forward(context.Background(), &concordv1.ForwardRequest{Command: []byte{1}})
		errs <- err
	}()
	eventually(t, 5*time.Second, func() error {
		if fs.calls.Load() == 0 {
			return errors.New("forward not in progress")
		}
		return nil
	})
	release := time.AfterFunc(time.Second, func() { close(fs.block) })
	defer release.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("Shutdown returned after %s, before the RPC in progress finished", el)
	}
	mustBeWithin(t, start, 3*time.Second, "graceful shutdown once the RPC finished")
	if err := <-errs; err != nil {
		t.Fatalf("the Forward in progress at shutdown: %v", err)
	}
}
