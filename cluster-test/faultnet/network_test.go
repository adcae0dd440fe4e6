package faultnet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/concordmap/concord/raftstore/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newNet(t *testing.T, mutate ...func(*Config)) *Network {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, m := range mutate {
		m(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// echoServer accepts on ln and echoes every connection until cleanup; it
// returns the accepted connections as they arrive.
func echoServer(t *testing.T, ln net.Listener) <-chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepted <- c
			wg.Go(func() { _, _ = io.Copy(c, c) })
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
	return accepted
}

func dialT(t *testing.T, n *Network, from, addr string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := n.Dialer(from)(ctx, addr)
	if err != nil {
		t.Fatalf("dial %s -> %s: %v", from, addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads the echo, with a deadline.
func roundTrip(c net.Conn, msg string, within time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(within))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo mismatch: " + string(buf))
	}
	return nil
}

func TestNetwork_Reachable(t *testing.T) {
	tests := []struct {
		name     string
		apply    func(n *Network)
		from, to string
		want     bool
	}{
		{"no rules", func(*Network) {}, "a", "b", true},
		{"same group", func(n *Network) { n.Partition([]string{"a", "b"}, []string{"c"}) }, "a", "b", true},
		{"other group", func(n *Network) { n.Partition([]string{"a", "b"}, []string{"c"}) }, "a", "c", false},
		{"other group reverse", func(n *Network) { n.Partition([]string{"a", "b"}, []string{"c"}) }, "c", "b", false},
		{"unnamed node is alone", func(n *Network) { n.Partition([]string{"a", "b"}) }, "a", "d", false},
		{"isolated", func(n *Network) { n.Isolate("b") }, "a", "b", false},
		{"isolated outbound", func(n *Network) { n.Isolate("b") }, "b", "c", false},
		{"rejoined", func(n *Network) { n.Isolate("b"); n.Rejoin("b") }, "a", "b", true},
		{"healed", func(n *Network) { n.Partition([]string{"a"}, []string{"b"}); n.Isolate("a"); n.Heal() }, "a", "b", true},
		{"self always", func(n *Network) { n.Isolate("a") }, "a", "a", true},
		{"unknown endpoint", func(n *Network) { n.Isolate("a") }, "a", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNet(t)
			tt.apply(n)
			if got := n.Reachable(tt.from, tt.to); got != tt.want {
				t.Fatalf("Reachable(%q, %q) = %v, want %v", tt.from, tt.to, got, tt.want)
			}
		})
	}
}

func TestNetwork_NamesBothEnds(t *testing.T) {
	n := newNet(t)
	ln := n.Listener("b", listen(t))
	accepted := echoServer(t, ln)
	c := dialT(t, n, "a", ln.Addr().String())
	if err := roundTrip(c, "hello", time.Second); err != nil {
		t.Fatal(err)
	}
	if got := n.NodeOf(ln.Addr().String()); got != "b" {
		t.Fatalf("NodeOf = %q, want b", got)
	}
	sc := (<-accepted).(*Conn)
	n.mu.Lock()
	remote := n.remoteLocked(sc)
	n.mu.Unlock()
	if sc.local != "b" || remote != "a" {
		t.Fatalf("accepted conn local=%q remote=%q, want b/a", sc.local, remote)
	}
	if n.Conns() != 2 {
		t.Fatalf("Conns = %d, want 2", n.Conns())
	}
	_ = c.Close()
	_ = sc.Close()
	if n.Conns() != 0 {
		t.Fatalf("Conns after close = %d, want 0", n.Conns())
	}
}

// TestNetwork_BlackholeAndHeal: a cut blocks a live connection (deadlines
// still fire) and Heal lets the held bytes through without loss.
func TestNetwork_BlackholeAndHeal(t *testing.T) {
	tests := []struct {
		name string
		cut  func(n *Network)
	}{
		{"partition", func(n *Network) { n.Partition([]string{"a"}, []string{"b"}) }},
		{"isolate dialer", func(n *Network) { n.Isolate("a") }},
		{"isolate listener", func(n *Network) { n.Isolate("b") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNet(t)
			ln := n.Listener("b", listen(t))
			echoServer(t, ln)
			c := dialT(t, n, "a", ln.Addr().String())
			if err := roundTrip(c, "before", time.Second); err != nil {
				t.Fatal(err)
			}
			tt.cut(n)
			err := roundTrip(c, "during", 100*time.Millisecond)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("round trip across a cut: err = %v, want a deadline error", err)
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("cut error %v is not a net.Error timeout", err)
			}
			n.Heal()
			// "during" was never written (the write timed out), so the
			// stream carries exactly what follows.
			if err := roundTrip(c, "after", time.Second); err != nil {
				t.Fatalf("after heal: %v", err)
			}
		})
	}
}

// TestNetwork_BytesInFlightSurviveCut: bytes the peer wrote before a cut
// and read by the wrapper during it are held back, not lost.
func TestNetwork_BytesInFlightSurviveCut(t *testing.T) {
	n := newNet(t)
	raw := listen(t)
	n.Register("b", raw.Addr().String()) // an unwrapped server, like gRPC's
	accepted := echoServer(t, raw)
	c := dialT(t, n, "a", raw.Addr().String())
	if err := roundTrip(c, "x", time.Second); err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	readErr := make(chan error, 1)
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 5)
		_, err := io.ReadFull(c, buf) // blocks in the socket read
		readErr <- err
		got <- string(buf)
	}()
	time.Sleep(20 * time.Millisecond) // let the reader block in the socket read
	n.Isolate("a")
	if _, err := srv.Write([]byte("held!")); err != nil { // unwrapped side writes freely
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		t.Fatalf("read returned during the cut: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	n.Rejoin("a")
	select {
	case err := <-readErr:
		if err != nil {
			t.Fatalf("read after rejoin: %v", err)
		}
		if s := <-got; s != "held!" {
			t.Fatalf("read %q, want held!", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("read still blocked after rejoin")
	}
}

func TestNetwork_CloseOnCut(t *testing.T) {
	n := newNet(t, func(c *Config) { c.CloseOnCut = true })
	ln := n.Listener("b", listen(t))
	echoServer(t, ln)
	c := dialT(t, n, "a", ln.Addr().String())
	if err := roundTrip(c, "ok", time.Second); err != nil {
		t.Fatal(err)
	}
	n.Partition([]string{"a"}, []string{"b"})
	if err := roundTrip(c, "gone", time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip on a cut connection: err = %v, want a close error", err)
	}
	if n.Conns() != 0 {
		t.Fatalf("Conns = %d after CloseOnCut, want 0", n.Conns())
	}
}

func TestNetwork_DialWaitsForReachability(t *testing.T) {
	n := newNet(t)
	ln := n.Listener("b", listen(t))
	echoServer(t, ln)
	n.Isolate("b")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := n.Dialer("a")(ctx, ln.Addr().String()); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dial to isolated node: err = %v, want ErrUnreachable", err)
	}

	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := n.Dialer("a")(ctx, ln.Addr().String())
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("dial returned while isolated: %v", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	n.Heal()
	r := <-done
	if r.err != nil {
		t.Fatalf("dial after heal: %v", r.err)
	}
	defer r.c.Close()
	if err := roundTrip(r.c, "late", time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestNetwork_DropConns(t *testing.T) {
	n := newNet(t)
	ln := n.Listener("b", listen(t))
	echoServer(t, ln)
	c1 := dialT(t, n, "a", ln.Addr().String())
	c2 := dialT(t, n, "c", ln.Addr().String())
	for _, c := range []net.Conn{c1, c2} {
		if err := roundTrip(c, "up", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	n.DropConns("a")
	if err := roundTrip(c1, "x", time.Second); err == nil {
		t.Fatal("a's connection still works after DropConns(a)")
	}
	if err := roundTrip(c2, "still", time.Second); err != nil {
		t.Fatalf("c's connection broken by DropConns(a): %v", err)
	}
	// New dials still work: DropConns is not isolation.
	c3 := dialT(t, n, "a", ln.Addr().String())
	if err := roundTrip(c3, "again", time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestNetwork_Delay checks one-way delays on wrapped and unwrapped peers.
func TestNetwork_Delay(t *testing.T) {
	const d = 60 * time.Millisecond
	tests := []struct {
		name    string
		wrapped bool
		from    string
		to      string
	}{
		{"wrapped outbound", true, "a", "b"},
		{"wrapped inbound", true, "b", "a"},
		{"unwrapped outbound", false, "a", "b"},
		{"unwrapped inbound", false, "b", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNet(t)
			var ln net.Listener = listen(t)
			if tt.wrapped {
				ln = n.Listener("b", ln)
			} else {
				n.Register("b", ln.Addr().String())
			}
			echoServer(t, ln)
			c := dialT(t, n, "a", ln.Addr().String())
			n.Delay(tt.from, tt.to, d)
			start := time.Now()
			if err := roundTrip(c, "ping", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if rtt := time.Since(start); rtt < d || rtt > d+500*time.Millisecond {
				t.Fatalf("round trip took %v with a one-way delay of %v", rtt, d)
			}
			n.Delay(tt.from, tt.to, 0)
			start = time.Now()
			if err := roundTrip(c, "pong", time.Second); err != nil {
				t.Fatal(err)
			}
			if rtt := time.Since(start); rtt >= d {
				t.Fatalf("round trip took %v after removing the delay", rtt)
			}
		})
	}
}

func TestNetwork_StreamLayer(t *testing.T) {
	n := newNet(t)
	sa := n.StreamLayer("a", listen(t))
	sb := n.StreamLayer("b", listen(t))
	echoServer(t, sb)
	t.Cleanup(func() { _ = sa.Close() })
	if got := n.NodeOf(sb.Addr().String()); got != "b" {
		t.Fatalf("stream layer address registered for %q, want b", got)
	}
	c, err := sa.Dial("127.0.0.1:1", 50*time.Millisecond) // nothing listens there
	if err == nil {
		_ = c.Close()
		t.Fatal("dial to a closed port succeeded")
	}
	n.Isolate("a")
	if _, err := sa.Dial(rafAddr(sb), 50*time.Millisecond); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("raft dial from isolated node: %v, want ErrUnreachable", err)
	}
	n.Heal()
	c, err = sa.Dial(rafAddr(sb), time.Second)
	if err != nil {
		t.Fatalf("raft dial: %v", err)
	}
	defer c.Close()
	if err := roundTrip(c, "append", time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestConfig_Validate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	c.DialTimeout = 0
	if c.Validate() == nil {
		t.Fatal("zero DialTimeout accepted")
	}
}

func rafAddr(l net.Listener) raft.ServerAddress { return raft.ServerAddress(l.Addr().String()) }
