package mapclient_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/mapclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)
}

// startNode starts a single-node dev cluster and stops it at cleanup.
func startNode(t *testing.T, id string) *node.Server {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	cfg.NodeID = id
	cfg.Logger = testLogger(t, id)
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// fastConfig is a client config with test-sized timings.
func fastConfig(t *testing.T, ptype string, urls ...string) mapclient.Config {
	cfg := mapclient.DefaultConfig()
	cfg.URLs = urls
	cfg.ParticipantType = ptype
	cfg.AttemptTimeout = 2 * time.Second
	cfg.MinBackoff = 20 * time.Millisecond
	cfg.MaxBackoff = 200 * time.Millisecond
	cfg.ReconnectTimeout = 15 * time.Second
	cfg.Logger = testLogger(t, "client")
	return cfg
}

func dial(t *testing.T, cfg mapclient.Config) *mapclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := mapclient.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxy is a TCP forwarder in front of a node, so a test can cut one
// client path while the node stays up.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) URL() string { return "ws://" + p.ln.Addr().String() + "/map" }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// Close stops accepting and cuts every forwarded connection.
func (p *proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// deadURL returns a ws URL on a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "ws://" + addr + "/map"
}
