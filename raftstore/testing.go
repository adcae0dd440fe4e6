package raftstore

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/concordmap/concord/raftstore/testlog"
)

// testReadyTimeout bounds how long NewTestStore waits for its store to
// elect itself; generous because CI machines are slow under -race.
const testReadyTimeout = 20 * time.Second

// TestConfig returns a Config for tests (never for production): fast raft
// timings (50 ms heartbeat and election), a transport on 127.0.0.1 with a
// free port, DataDir in tb.TempDir(), and logs to tb.Output() tagged with
// a "node" attribute, so they show only for failing tests or with -v.
// Logs written after tb's cleanups ran (a straggler past Shutdown) are
// dropped: call it before starting the store, so the store's shutdown,
// a later cleanup, still logs to the test.
func TestConfig(tb testing.TB, nodeID string, modules ...Module) Config {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.NodeID = nodeID
	cfg.DataDir = tb.TempDir()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Modules = modules
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(tb), &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", nodeID)
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.TransportTimeout = 2 * time.Second
	return cfg
}

// NewTestStore starts a single-node Store for tests in other packages:
// real raft with fsync'ed bolt storage in tb.TempDir(), bootstrapped, and
// leader by the time it returns, so Apply works at once. It is shut down
// (and checked to shut down cleanly) by tb.Cleanup. It calls tb.Fatal on
// any setup error.
func NewTestStore(tb testing.TB, modules ...Module) *Store {
	tb.Helper()
	return StartTestStore(tb, TestConfig(tb, "test-node", modules...))
}

// StartTestStore is NewTestStore with a caller-adjusted Config (usually one
// from TestConfig). cfg.DataDir may hold state from an earlier store, which
// is then recovered instead of bootstrapped afresh.
func StartTestStore(tb testing.TB, cfg Config) *Store {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatalf("raftstore: new test store: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testReadyTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			tb.Errorf("raftstore: shut down test store: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testReadyTimeout)
	defer cancel()
	if err := s.BootstrapSelf(ctx); err != nil {
		tb.Fatalf("raftstore: bootstrap test store: %v", err)
	}
	if err := s.WaitLeadership(ctx); err != nil {
		tb.Fatalf("raftstore: test store did not become leader: %v", err)
	}
	return s
}
