package console

import (
	"context"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// TestJS runs the console's JavaScript unit tests (jstest/: the MAP
// client's failover and resume against fake nodes, the run view's model)
// with Node's built-in test runner. `make test` needs Node.js anyway (the
// SDK interop test), so a missing node fails; -short skips.
func TestJS(t *testing.T) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		if testing.Short() {
			t.Skip("node is not on PATH: the console's JavaScript unit tests are skipped under -short")
		}
		t.Fatal("node is not on PATH: the console's JavaScript unit tests need Node.js (see README Prerequisites)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, nodeBin, "--test", "jstest/").CombinedOutput()
	if err != nil {
		t.Fatalf("node --test jstest/: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^# pass [1-9]`).Match(out) {
		t.Fatalf("node --test jstest/ ran no test:\n%s", out)
	}
}
