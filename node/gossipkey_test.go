package node_test

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/membership"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// encryptedConfig is a dev node with an encrypted gossip key.
func encryptedConfig(t *testing.T, id string, key []byte) node.Config {
	c := node.DevConfig(t.TempDir())
	c.NodeID = id
	c.GossipAddr = freeGossipAddr(t)
	c.GossipKey, c.GossipPlaintext = key, false
	c.Membership.Timings = membership.TestTimings()
	c.Membership.JoinRetryInterval = 100 * time.Millisecond
	c.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
	return c
}

// A node started with another key than its seeds' fails its start within
// seconds, with an error that says it is the gossip key (not after the
// ready timeout with "wait for servers" or "no raft leader").
func TestStart_WrongGossipKeyFailsFast(t *testing.T) {
	seedCfg := encryptedConfig(t, "n1", newKey(t))
	startConfig(t, seedCfg)

	cfg := encryptedConfig(t, "n2", newKey(t))
	cfg.Bootstrap = false
	cfg.Join = []string{seedCfg.GossipAddr}
	cfg.ReadyTimeout = time.Minute
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	start := time.Now()
	err = srv.Start(t.Context())
	if !errors.Is(err, membership.ErrGossipKey) {
		t.Fatalf("Start = %v, want ErrGossipKey", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the key error took %s", took)
	}
	for _, want := range []string{"gossip", seedCfg.GossipAddr, membership.KeyFingerprint(cfg.GossipKey), node.KeyringFileName} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// The keyring file seeded from the configured key is the owner's alone, and
// later starts need no key.
func TestStart_KeyringFileSeededAndReused(t *testing.T) {
	key := newKey(t)
	cfg := encryptedConfig(t, "n1", key)
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, node.KeyringFileName)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("keyring mode %v, want 0600", info.Mode().Perm())
	}
	cfg.GossipKey = nil
	cfg.Bootstrap = false
	srv2, err := node.New(cfg)
	if err != nil {
		t.Fatalf("restart without a key: %v", err)
	}
	if err := srv2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = srv2.Shutdown(context.Background())
}
