package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBin runs the concord binary with args (and extra environment) and
// returns its combined output.
func runBin(t *testing.T, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	return runConcord(t, bin, env, args...)
}

// TestProcs_SnapshotHealthAndConfig drives the real binary as an operator
// would: `concord snapshot save` from a follower of one system of three
// server processes, `inspect`, `restore` into a second system, `concord
// health --ready` (the container's probe), and `concord server
// --print-config` from a config file plus CONCORD_* environment.
func TestProcs_SnapshotHealthAndConfig(t *testing.T) {
	a := StartProcs(t, 3)
	cl := a.Connect(t, 0, map[string]any{"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	for i := range 5 {
		if err := cl.Register(fmt.Sprintf("kept-%d", i), nil); err != nil {
			t.Fatalf("register: %s", Describe(err))
		}
	}
	bin := ConcordBinary(t)
	op := OperatorEnv(t) // the CLI's operator certificate (CONCORD_CA_FILE, ...)
	var caFile string
	for _, kv := range op {
		if v, ok := strings.CutPrefix(kv, "CONCORD_CA_FILE="); ok {
			caFile = v
		}
	}
	var follower *Proc
	for _, p := range a.Running() {
		if p != a.Leader(t) {
			follower = p
			break
		}
	}
	file := filepath.Join(t.TempDir(), "a.snap")
	if out, err := runBin(t, bin, op, "snapshot", "save", "--addr", follower.GRPCAddr, file); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	out, err := runBin(t, bin, nil, "snapshot", "inspect", file)
	if err != nil || !strings.Contains(out, "registry") || !strings.Contains(out, `system "clustertest"`) {
		t.Fatalf("snapshot inspect: %v\n%s", err, out)
	}

	b := StartProcs(t, 3)
	if out, err := runBin(t, bin, op, "snapshot", "restore", "--addr", b.Proc(1).GRPCAddr, file); err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	reader := b.Connect(t, 2, map[string]any{"participantType": "client"})
	Eventually(t, ConvergeTimeout, func() error {
		for i := range 5 {
			if _, err := reader.Call("map/agents/get", map[string]any{"agentId": fmt.Sprintf("kept-%d", i)}); err != nil {
				return fmt.Errorf("kept-%d on the restored system: %s", i, Describe(err))
			}
		}
		return nil
	})

	if out, err := runBin(t, bin, nil, "health", "--ready", "--url", "https://"+b.Proc(2).HTTPAddr, "--ca-file", caFile); err != nil {
		t.Fatalf("health --ready: %v\n%s", err, out)
	}
	b.Stop(t, 2)
	if out, err := runBin(t, bin, nil, "health", "--url", "https://"+b.Proc(2).HTTPAddr, "--ca-file", caFile, "--timeout", "1s"); err == nil {
		t.Fatalf("health of a stopped node succeeded:\n%s", out)
	}

	cfg := filepath.Join(t.TempDir(), "concord.yaml")
	if err := os.WriteFile(cfg, []byte("node-id: from-file\nsystem-id: from-file\njoin: [a:7703, b:7703]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err = runBin(t, bin, []string{"CONCORD_SYSTEM_ID=from-env", "CONCORD_GOSSIP_KEY_FILE=/etc/concord/gossip.key"},
		"server", "--config", cfg, "--print-config", "--http-addr", "127.0.0.1:1", "--tls-key-file", "/etc/concord/key.pem")
	// No data dir nor TLS material: printed, then refused (exit status 1).
	if err == nil || !strings.Contains(out, "# not valid: ") {
		t.Fatalf("print-config of settings a start refuses: %v, want exit status 1 and a `# not valid` line\n%s", err, out)
	}
	for _, want := range []string{"node-id: from-file  # file", "system-id: from-env  # env", "gossip-key-file: /etc/concord/gossip.key  # env",
		"http-addr: 127.0.0.1:1  # flag", "join: ['a:7703', 'b:7703']  # file", "tls-key-file: /etc/concord/key.pem  # flag"} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "gossip-key:") || time.Since(start) > 10*time.Second {
		t.Fatalf("print-config showed the removed --gossip-key or started a server:\n%s", out)
	}
}
