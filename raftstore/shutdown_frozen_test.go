package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// frozenShutdownBound is how long a leader's Shutdown may take with a
// follower frozen: shutdownGrace plus the rest of a shutdown with room for
// a loaded -race run, well under the 10 s TransportTimeout it waited out
// before (and under a node's 10 s shutdown budget).
const frozenShutdownBound = 3 * time.Second

// A leader stops promptly while one of its followers is frozen (as a
// SIGSTOP'd process: its sockets stay open and it reads nothing), with
// writes in flight to it, over plain TCP and over TLS. raft.Shutdown
// waits for the replication and heartbeat goroutines, which sat in an RPC
// to the frozen follower until TransportTimeout (10 s here, as in
// production); now Shutdown cuts the transport's dialled connections
// after shutdownGrace (dialcut.go).
func TestShutdown_PromptWithFrozenFollower(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			testShutdownWithFrozenFollower(t, useTLS)
		})
	}
}

func testShutdownWithFrozenFollower(t *testing.T, useTLS bool) {
	var serverTLS, clientTLS = testTLS(t)
	layers := map[*Store]*freezeLayer{}
	var stores []*Store
	for i := range 3 {
		fl := &freezeLayer{}
		cfg := clusterConfig(t, fmt.Sprintf("n%d", i+1), newKV())
		cfg.TransportTimeout = 10 * time.Second // production's
		cfg.WrapStreamLayer = func(inner raft.StreamLayer) raft.StreamLayer {
			if useTLS {
				inner = &tlsLayer{StreamLayer: inner, server: serverTLS, client: clientTLS}
			}
			fl.StreamLayer = inner
			return fl
		}
		s := mustNew(t, cfg)
		t.Cleanup(func() { mustShutdown(t, s) })
		layers[s] = fl
		stores = append(stores, s)
	}
	ctx := testCtx(t)
	if err := stores[0].BootstrapSelf(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stores[0].WaitLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	addVoters(t, stores[:1], stores[1:]...)
	c := &testCluster{stores: stores}
	leader := c.requireOneLeader(t, stores)
	var frozen *Store
	for _, s := range stores {
		if s != leader {
			frozen = s
		}
	}

	// Runs before the stores' shutdowns (cleanups run last first).
	t.Cleanup(layers[frozen].thaw)
	layers[frozen].freeze()

	// Writes commit on the other two; the leader sends them to the frozen
	// follower too, which never answers.
	value := strings.Repeat("v", 8<<10)
	for i := range 64 {
		if _, _, err := leader.Apply(ctx, cmdKVPut, put(fmt.Sprintf("k%d=%s", i, value))); err != nil {
			t.Fatalf("write %d with one follower frozen: %v", i, err)
		}
	}
	eventually(t, waitTimeout, func() error {
		if n := layers[frozen].held.Load(); n == 0 {
			return fmt.Errorf("the frozen follower has not been sent anything since it froze")
		}
		return nil
	})

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- leader.Shutdown(context.Background()) }()
	deadline := time.NewTimer(frozenShutdownBound)
	defer deadline.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("leader shutdown: %v", err)
		}
		t.Logf("leader shut down in %s with a follower frozen", time.Since(start).Round(time.Millisecond))
	case <-deadline.C:
		err := <-done // no goroutine outlives the test
		t.Fatalf("leader shutdown took %s (err %v) with a follower frozen, want under %s",
			time.Since(start).Round(time.Millisecond), err, frozenShutdownBound)
	}
	if !leader.graceCut {
		t.Fatal("raft stopped within the grace with a follower frozen: the test froze nothing")
	}
	if n := openDials(leader.layer.dials); n != 0 {
		t.Fatalf("%d dialled connections still open after shutdown", n)
	}
}

// freezeLayer wraps a stream layer so that a test can freeze its server as
// SIGSTOP would: while frozen, nothing read from its connections reaches
// the server and nothing it writes or dials goes out; the sockets stay
// open, so peers' writes pile up and their reads wait. Closing a
// connection still works (the frozen server's own shutdown comes after
// thaw anyway).
type freezeLayer struct {
	raft.StreamLayer

	mu     sync.Mutex
	thawCh chan struct{} // nil when not frozen; closed by thaw
	held   atomic.Int64  // reads that returned data while frozen
}

func (l *freezeLayer) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.thawCh == nil {
		l.thawCh = make(chan struct{})
	}
}

func (l *freezeLayer) thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.thawCh != nil {
		close(l.thawCh)
		l.thawCh = nil
	}
}

// frozen returns the channel thaw closes, nil when not frozen.
func (l *freezeLayer) frozen() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.thawCh
}

// wait returns at once unless frozen; then when thawed or closed closes.
func (l *freezeLayer) wait(closed <-chan struct{}) {
	if ch := l.frozen(); ch != nil {
		select {
		case <-ch:
		case <-closed:
		}
	}
}

func (l *freezeLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return newFreezeConn(l, c), nil
}

func (l *freezeLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.wait(nil)
	c, err := l.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return newFreezeConn(l, c), nil
}

type freezeConn struct {
	net.Conn
	layer  *freezeLayer
	closed chan struct{}
	once   sync.Once
}

func newFreezeConn(l *freezeLayer, c net.Conn) *freezeConn {
	return &freezeConn{Conn: c, layer: l, closed: make(chan struct{})}
}

func (c *freezeConn) Read(p []byte) (int, error) {
	c.layer.wait(c.closed)
	n, err := c.Conn.Read(p)
	if n > 0 && c.layer.frozen() != nil {
		c.layer.held.Add(1) // arrived as the server froze: held back
		c.layer.wait(c.closed)
	}
	return n, err
}

func (c *freezeConn) Write(p []byte) (int, error) {
	c.layer.wait(c.closed)
	return c.Conn.Write(p)
}

// Close closes abruptly, as the transport's own connections do.
func (c *freezeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return closeAbruptly(c.Conn)
}

// With every peer healthy a leader's stop stays graceful: leadership is
// handed off first, as a node's stop does, raft stops on its own within
// shutdownGrace under writes, and nothing is cut.
func TestShutdown_HealthyLeaderStopsWithoutCut(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.TransportTimeout = 10 * time.Second })
	ctx := testCtx(t)
	leader := c.requireOneLeader(t, c.stores)
	stop := steadyWrites(t, leader, 4)
	eventually(t, waitTimeout, func() error {
		err := leader.LeadershipTransfer(ctx)
		if errors.Is(err, ErrNotLeader) && !leader.IsLeader() {
			return nil
		}
		return err
	})
	stop()
	if err := leader.Shutdown(ctx); err != nil {
		t.Fatalf("old leader's shutdown: %v", err)
	}
	if leader.graceCut {
		t.Fatal("a healthy stop cut the transport's connections to stop raft")
	}
	var live []*Store
	for _, s := range c.stores {
		if s != leader {
			live = append(live, s)
		}
	}
	next := c.requireOneLeader(t, live)
	if _, _, err := next.Apply(ctx, cmdKVPut, put("after=1")); err != nil {
		t.Fatalf("write on the new leader after the old one stopped: %v", err)
	}
}

// openDials returns how many of d's connections are open.
func openDials(d *dialSet) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}
