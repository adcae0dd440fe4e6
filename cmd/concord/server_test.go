package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node"
)

// serverConfig parses server flags the way `concord server` does and
// returns the node.Config they produce, without starting a node.
func serverConfig(t *testing.T, args ...string) (node.Config, error) {
	t.Helper()
	var f serverFlags
	cmd := &cobra.Command{Use: "server"}
	f.bind(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		return node.Config{}, err
	}
	f.changed = cmd.Flags().Changed
	cfg, cleanup, err := f.config()
	t.Cleanup(cleanup)
	return cfg, err
}

func TestServerFlags_RaftMultiplier(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	dev := node.DevConfig(t.TempDir()).Raft
	base := []string{"--node-id", "n1", "--data-dir", t.TempDir(), "--insecure"}
	tests := []struct {
		name      string
		args      []string
		heartbeat time.Duration
		lease     time.Duration
		commit    time.Duration
		errHas    string
	}{
		{name: "default keeps today's timings", args: base, heartbeat: ms(500), lease: ms(250), commit: ms(50)},
		{name: "fastest", args: append(base, "--raft-multiplier", "1"), heartbeat: ms(100), lease: ms(100), commit: ms(10)},
		{name: "tolerant", args: append(base, "--raft-multiplier", "10"), heartbeat: ms(1000), lease: ms(500), commit: ms(100)},
		{name: "dev keeps its own", args: []string{"--dev"}, heartbeat: dev.HeartbeatTimeout, lease: dev.LeaderLeaseTimeout, commit: dev.CommitTimeout},
		{name: "dev with a multiplier", args: []string{"--dev", "--raft-multiplier", "2"}, heartbeat: ms(200), lease: ms(100), commit: ms(20)},
		{name: "zero", args: append(base, "--raft-multiplier", "0"), errHas: "--raft-multiplier: raftstore: invalid config: raft multiplier 0 out of range"},
		{name: "too large", args: append(base, "--raft-multiplier", "11"), errHas: "use 1 (fastest failover"},
		{name: "not a number", args: append(base, "--raft-multiplier", "fast"), errHas: "invalid argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := serverConfig(t, tt.args...)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := cfg.Raft
			if r.HeartbeatTimeout != tt.heartbeat || r.ElectionTimeout != tt.heartbeat || r.LeaderLeaseTimeout != tt.lease || r.CommitTimeout != tt.commit {
				t.Fatalf("raft timings %+v, want heartbeat/election %v, lease %v, commit %v", r.Timings(), tt.heartbeat, tt.lease, tt.commit)
			}
		})
	}
}

// The flag's error reaches the user through the real command, before any
// listener opens.
func TestServerCmd_RaftMultiplierError(t *testing.T) {
	_, err := execRoot(t, "server", "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-multiplier", "0")
	if !errors.Is(err, node.ErrInvalidRaftConfig) || !strings.Contains(err.Error(), "--raft-multiplier") {
		t.Fatalf("err = %v, want a --raft-multiplier ErrInvalidConfig", err)
	}
}

func TestServerFlags_GossipKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	b64 := base64.StdEncoding.EncodeToString(key)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad, short := file("good", b64+"\n"), file("bad", "not base64!"), file("short", base64.StdEncoding.EncodeToString([]byte("short")))
	base := []string{"--node-id", "n1", "--data-dir", t.TempDir(), "--insecure"}
	tests := []struct {
		name   string
		args   []string
		env    string
		want   []byte
		errHas string
	}{
		{name: "file", args: append(base, "--gossip-key-file", good), want: key},
		{name: "env", args: base, env: b64, want: key},
		{name: "none", args: base},
		{name: "value flag refused", args: append(base, "--gossip-key", b64), errHas: "--gossip-key-file"},
		{name: "both", args: append(base, "--gossip-key-file", good), env: b64, errHas: "given twice"},
		{name: "missing file", args: append(base, "--gossip-key-file", filepath.Join(dir, "nope")), errHas: "no such file"},
		{name: "not base64", args: append(base, "--gossip-key-file", bad), errHas: "not base64"},
		{name: "wrong size", args: append(base, "--gossip-key-file", short), errHas: "5 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(gossipKeyEnv, tt.env)
			}
			cfg, err := serverConfig(t, tt.args...)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %q", err, tt.errHas)
				}
				if strings.Contains(err.Error(), b64) {
					t.Fatalf("the error repeats the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(cfg.GossipKey, tt.want) {
				t.Fatalf("key %x, want %x", cfg.GossipKey, tt.want)
			}
		})
	}
}

// After the first start the keyring in the data dir is the key: an
// --insecure restart without a key file keeps gossip encrypted.
func TestServerFlags_KeyringMakesTheKeyOptional(t *testing.T) {
	dir := t.TempDir()
	cfg, err := serverConfig(t, "--node-id", "n1", "--data-dir", dir, "--insecure")
	if err != nil || !cfg.GossipPlaintext {
		t.Fatalf("no key, no keyring: %v plaintext=%v, want plaintext gossip", err, cfg.GossipPlaintext)
	}
	if err := os.WriteFile(filepath.Join(dir, node.KeyringFileName), []byte(`{"keys":["MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = serverConfig(t, "--node-id", "n1", "--data-dir", dir, "--insecure")
	if err != nil || cfg.GossipPlaintext {
		t.Fatalf("keyring present: %v plaintext=%v, want encrypted gossip", err, cfg.GossipPlaintext)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("keyring present, no key: %v", err)
	}
}
