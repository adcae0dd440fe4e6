package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The concord binary for process-level tests is built once per test binary
// into a temporary directory that TestMain removes.
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// ConcordBinary builds github.com/concordmap/concord/cmd/concord once per
// test binary (go build, no race detector: the processes are the system
// under test, not the code under -race) and returns its path.
func ConcordBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "concord-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		bin := filepath.Join(dir, "concord")
		ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/concordmap/concord/cmd/concord").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build cmd/concord: %w\n%s", err, out)
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		t.Fatalf("clustertest: %v", buildErr)
	}
	return buildBin
}

// removeBuiltBinary deletes the built binary; TestMain calls it.
func removeBuiltBinary() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}
