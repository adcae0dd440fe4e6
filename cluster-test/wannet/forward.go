//go:build linux

package wannet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Forwarder accepts TCP connections on 127.0.0.1 in the host namespace
// and joins each to a target inside a namespace: tools that only dial
// (the concord CLI, HTTP clients) reach a process in a namespace through
// it. Close stops it and every connection it carries.
type Forwarder struct {
	// Addr is the host-side address (127.0.0.1:port).
	Addr string

	ns     *Namespace
	target string
	ln     net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// forwardDialTimeout bounds the dial into the namespace.
const forwardDialTimeout = 5 * time.Second

// Forward starts a forwarder to target (IP:port inside n).
func (n *Namespace) Forward(target string) (*Forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("wannet: forwarder listen: %w", err)
	}
	f := &Forwarder{Addr: ln.Addr().String(), ns: n, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.accept() }()
	return f, nil
}

func (f *Forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.join(c) }()
	}
}

// track registers c for Close; false when the forwarder is closing.
func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	_ = c.Close()
}

// join copies bytes both ways between c and a new connection to the
// target until either side ends.
func (f *Forwarder) join(c net.Conn) {
	if !f.track(c) {
		_ = c.Close()
		return
	}
	defer f.untrack(c)
	ctx, cancel := context.WithTimeout(context.Background(), forwardDialTimeout)
	t, err := f.ns.DialContext(ctx, "tcp", f.target)
	cancel()
	if err != nil {
		return
	}
	if !f.track(t) {
		_ = t.Close()
		return
	}
	defer f.untrack(t)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(t, c)
	go pipe(c, t)
	<-done
	// One side ended: close both so the other copy ends too.
	_ = c.Close()
	_ = t.Close()
	<-done
}

// Close stops accepting, closes every forwarded connection and waits for
// the goroutines. Idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
