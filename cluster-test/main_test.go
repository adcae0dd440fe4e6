package clustertest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain removes the concord binary built for process-level tests and
// then checks for leaked goroutines (only when everything passed: a failed
// test may legitimately leave a hung node behind).
func TestMain(m *testing.M) {
	code := m.Run()
	removeBuiltBinary()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
