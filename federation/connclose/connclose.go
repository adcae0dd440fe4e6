package connclose

import (
	"net"
	"time"
)

// Grace is how long a close waits for its goodbye (the TLS alert, gRPC's
// GOAWAY) to go out before it cuts the socket. A peer that reads takes
// either at once; only a stalled one makes the close wait this long.
const Grace = 250 * time.Millisecond

// Close closes c. A TLS connection (anything with NetConn, as *tls.Conn)
// sends close_notify if that completes within grace; otherwise its socket
// is closed underneath, which ends the alert's write at once. Other
// connections are closed as they are.
func Close(c net.Conn, grace time.Duration) error {
	nc, ok := c.(interface{ NetConn() net.Conn })
	if !ok {
		return c.Close()
	}
	return closeWithCut(c, nc.NetConn(), grace)
}

// closeWithCut closes c, closing raw (the socket under c) if c's close
// has not returned within grace.
func closeWithCut(c, raw net.Conn, grace time.Duration) error {
	cut := time.AfterFunc(grace, func() { _ = raw.Close() })
	err := c.Close()
	if !cut.Stop() {
		// The goodbye did not go out in time and the socket was cut: the
		// connection is closed, as asked; the failed write is no news.
		return nil
	}
	return err
}

// CloseWithin runs closeFn (a gRPC ClientConn's Close, say) and, if it
// has not returned within grace, calls abort (Credentials.Abort) to cut
// the sockets under it; it then waits for closeFn to return.
func CloseWithin(closeFn func() error, grace time.Duration, abort func()) error {
	done := make(chan error, 1)
	go func() { done <- closeFn() }() // waited for below
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	abort()
	return <-done
}
