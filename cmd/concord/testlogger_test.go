package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// testLogger is the logger for an in-process node or anything else that
// may log after its test ended (a server's stragglers, a goroutine ending
// its round after Shutdown): a write after the test is dropped instead of
// panicking the package's run. Call it before starting what logs, so the
// shutdown's own logs still reach the test. (raftstore/testlog does the
// same for node, raftstore and cluster-test; cmd imports node packages
// only, STYLE.md §1.)
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testOutput(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testOutput is t's output until t's cleanups run, then a sink.
func testOutput(t testing.TB) *detachable {
	w := &detachable{w: t.Output()}
	t.Cleanup(w.detach) // registered first, so it runs after the server's cleanups
	return w
}

// detachable forwards to w until detach.
type detachable struct {
	mu sync.Mutex
	w  io.Writer
}

func (d *detachable) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w == nil {
		return len(p), nil
	}
	return d.w.Write(p)
}

func (d *detachable) detach() {
	d.mu.Lock()
	d.w = nil
	d.mu.Unlock()
}

// directOutput matches a test log destination that is unsafe for a
// server: the test's own output, written to after the test ended.
var directOutput = regexp.MustCompile(`\b(t|tb|b)\.Output\(\)`)

// No test in this package hands t.Output() to what may outlive it: they
// use testLogger. (A write after the last test ended panics the whole
// run, so the failure is rare and far from its cause; this finds it in
// the source.)
func TestTestsLogThroughTestLogger(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f == "testlogger_test.go" { // the helper itself
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if code, _, _ := strings.Cut(line, "//"); directOutput.MatchString(code) && !strings.Contains(code, "regexp.") {
				t.Errorf("%s:%d writes to the test's output directly; use testLogger(t): %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// A write after the test's cleanups ran is dropped instead of reaching
// the finished test's output.
func TestTestOutput_DetachedAfterCleanup(t *testing.T) {
	var w *detachable
	t.Run("inner", func(t *testing.T) { w = testOutput(t) })
	w.mu.Lock()
	detached := w.w == nil
	w.mu.Unlock()
	if !detached {
		t.Fatal("still attached to the finished subtest's output")
	}
	if n, err := w.Write([]byte("after the test\n")); n != len("after the test\n") || err != nil {
		t.Fatalf("write after the test = %d, %v; want dropped, reported written", n, err)
	}
}
