package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeyring_RotateWhileGossiping rotates the gossip key of three running
// `concord server` processes with the real CLI, each step sent to a
// different node (install, use, remove), while the cluster keeps gossiping
// and committing writes; then a node restarted after the rotation, still
// pointed at the old key file, joins again from its persisted keyring.
func TestKeyring_RotateWhileGossiping(t *testing.T) {
	pc := StartProcs(t, 3)
	addr := func(i int) string { return pc.Proc(i).GRPCAddr }
	cl := pc.Connect(t, 0, map[string]any{"participantType": "system"})
	writes := 0
	write := func() {
		t.Helper()
		writes++
		registerRetry(t, cl, fmt.Sprintf("rot-%d", writes), nil)
	}
	before := cliKeyrings(t, addr(0))
	old := requireOneKey(t, before)

	out, errOut, code := runCLI(t, "keygen")
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	newKey := filepath.Join(t.TempDir(), "new.key")
	if err := os.WriteFile(newKey, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI(t, "keyring", "install", "--gossip-key-file", newKey, "--addr", addr(1))
	if code != 0 || strings.Count(out, " ok") != 3 {
		t.Fatalf("keyring install: exit %d\n%s%s", code, out, errOut)
	}
	fresh := strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "installing key ")
	write()
	if got := cliKeyrings(t, addr(2)); len(got) != 3 || len(got["p1"]) != 2 {
		t.Fatalf("after install: %v, want two keys on each of three nodes", got)
	}
	for _, step := range [][]string{{"use", fresh, addr(2)}, {"remove", old, addr(0)}} {
		out, errOut, code := runCLI(t, "keyring", step[0], step[1], "--addr", step[2])
		if code != 0 || strings.Count(out, " ok") != 3 {
			t.Fatalf("keyring %s: exit %d\n%s%s", step[0], code, out, errOut)
		}
		write()
	}
	after := cliKeyrings(t, addr(1))
	if got := requireOneKey(t, after); got != fresh {
		t.Fatalf("after the rotation every node holds %s, want the new key %s", got, fresh)
	}
	// Gossip keeps flowing on the new key: nobody is suspected and
	// declared dead over a few probe rounds.
	consistently(t, 3*time.Second, func() error { return cliAllAlive(t, pc) })

	// A node restarted after the rotation still has the old key in its
	// --gossip-key-file; the keyring in its data dir wins, and it joins.
	pc.Stop(t, 2)
	pc.Restart(t, 2)
	Eventually(t, MembershipTimeout, func() error { return cliAllAlive(t, pc) })
	if got := requireOneKey(t, cliKeyrings(t, addr(2))); got != fresh {
		t.Fatalf("restarted node holds %s, want %s", got, fresh)
	}
	write()
}

// cliKeyrings runs `concord keyring list` and returns node -> keys, the
// primary marked with a trailing "*".
func cliKeyrings(t *testing.T, addr string) map[string][]string {
	t.Helper()
	out, errOut, code := runCLI(t, "keyring", "list", "--addr", addr)
	if code != 0 {
		t.Fatalf("keyring list --addr %s: exit %d: %s", addr, code, errOut)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("keyring list: unexpected row %q in\n%s", line, out)
		}
		key := f[1]
		if f[2] == "true" {
			key += "*"
		}
		got[f[0]] = append(got[f[0]], key)
	}
	return got
}

// requireOneKey checks every node holds exactly one key, the same, primary,
// and returns its fingerprint.
func requireOneKey(t *testing.T, rings map[string][]string) string {
	t.Helper()
	var fp string
	for id, keys := range rings {
		if len(keys) != 1 || !strings.HasSuffix(keys[0], "*") {
			t.Fatalf("%s holds %v, want one primary key (all: %v)", id, keys, rings)
		}
		if fp == "" {
			fp = keys[0]
		} else if keys[0] != fp {
			t.Fatalf("nodes hold different keys: %v", rings)
		}
	}
	if len(rings) == 0 {
		t.Fatal("no node answered")
	}
	return strings.TrimSuffix(fp, "*")
}

// cliAllAlive checks `concord members` on every running process lists
// every process alive.
func cliAllAlive(t *testing.T, pc *ProcCluster) error {
	t.Helper()
	for _, p := range pc.Running() {
		out, errOut, code := runCLI(t, "members", "--addr", p.GRPCAddr)
		if code != 0 {
			return fmt.Errorf("members --addr %s: exit %d: %s", p.GRPCAddr, code, errOut)
		}
		for _, q := range pc.Procs() {
			if !hasRow(out, q.ID, "alive") {
				return fmt.Errorf("%s does not see %s alive:\n%s", p, q.ID, out)
			}
		}
	}
	return nil
}

func hasRow(out, id, status string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id && f[1] == status {
			return true
		}
	}
	return false
}
