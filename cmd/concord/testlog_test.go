package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/concordmap/concord/raftstore/testlog"
)

// testLogger is the logger for an in-process node or anything else that
// may log after its test ended (a server's stragglers, a goroutine ending
// its round after Shutdown): through testlog.Output, a write after the
// test is dropped instead of panicking the package's run. Call it before
// starting what logs, so the shutdown's own logs still reach the test.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// directOutput matches a test log destination that is unsafe for a
// server: the test's own output, written to after the test ended.
var directOutput = regexp.MustCompile(`\b(t|tb|b)\.Output\(\)`)

// No test in this package hands t.Output() to what may outlive it: they
// use testLogger. (A write after the last test ended panics the whole
// run, so the failure is rare and far from its cause; this finds it in
// the source.)
func TestTestsLogThroughTestlog(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
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
