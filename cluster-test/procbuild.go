package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// builtAt caches ConcordBinaryAt's builds by revision; builtDirs are
// their build directories. Both guarded by builtAtMu.
var (
	builtAtMu sync.Mutex
	builtAt   = map[string]string{}
	builtDirs []string
)

// ConcordBinaryAt builds cmd/concord as it was at git revision rev (a
// commit or tag of this repository): the tree is exported with git
// archive into a temporary directory and built there, with the module
// cache the current tree uses. It skips t when the revision is not in the
// local history (a shallow clone).
func ConcordBinaryAt(t testing.TB, rev string) string {
	t.Helper()
	builtAtMu.Lock()
	defer builtAtMu.Unlock()
	if bin, ok := builtAt[rev]; ok {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("clustertest: revision %s not in the local git history (shallow clone?): %v %s", rev, err, out)
	}
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("clustertest: git rev-parse --show-toplevel: %v", err)
	}
	dir, err := os.MkdirTemp("", "concord-"+rev+"-")
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	builtDirs = append(builtDirs, dir)
	src := filepath.Join(dir, "src")
	tarball := filepath.Join(dir, "src.tar")
	steps := []*exec.Cmd{
		exec.CommandContext(ctx, "git", "archive", "--format=tar", "-o", tarball, rev),
		exec.CommandContext(ctx, "mkdir", src),
		exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", src),
		// -trimpath: the build cache keys packages by directory otherwise,
		// and the tree is exported to a new one each time (17 s against 3 s
		// for a repeated build of be534b6 under load).
		exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "concord"), "./cmd/concord"),
	}
	steps[0].Dir = strings.TrimSpace(string(top)) // git archive of a subdirectory holds only it
	steps[3].Dir = src
	for _, cmd := range steps {
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("clustertest: build concord at %s: %v: %v\n%s", rev, cmd.Args, err, out)
		}
	}
	builtAt[rev] = filepath.Join(dir, "concord")
	return builtAt[rev]
}

// removeBuiltBinary deletes the built binaries; TestMain calls it.
func removeBuiltBinary() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	builtAtMu.Lock()
	defer builtAtMu.Unlock()
	for _, d := range builtDirs {
		_ = os.RemoveAll(d)
	}
}
