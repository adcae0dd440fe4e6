package mapclient_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)
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
