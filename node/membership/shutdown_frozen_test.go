package membership

import (
	"net"
	"sync"
	"testing"
	"time"
)

// frozenSeed listens on loopback, accepts connections and never reads
// them, as a seed whose process is stopped (the kernel still accepts).
// It reports each accepted connection on the returned channel.
func frozenSeed(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
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
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String(), accepted
}

// Shutdown does not wait out TCPTimeout for a join whose seed froze: the
// join's connection is cut. Before, Shutdown waited for the join attempt,
// which waited TCPTimeout (10 s on a LAN) for the seed's answer.
func TestMembership_ShutdownPromptWithFrozenSeed(t *testing.T) {
	seed, accepted := frozenSeed(t)
	cfg := testConfig(t, "n1")
	cfg.Timings.TCPTimeout = 10 * time.Second // LANTimings'
	cfg.JoinAddrs = []string{seed}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-accepted: // the join's exchange with the seed is under way
	case <-time.After(10 * time.Second):
		_ = m.Shutdown()
		t.Fatal("the join never reached the seed")
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- m.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		t.Logf("shut down in %s with a join to a frozen seed in flight", time.Since(start).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		err := <-done
		t.Fatalf("Shutdown took %s (err %v) with a join to a frozen seed in flight, want under 2s",
			time.Since(start).Round(time.Millisecond), err)
	}
}
