package main

import (
	"errors"
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
