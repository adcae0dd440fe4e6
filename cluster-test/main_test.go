package clustertest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain removes the concord binary built for process-level tests and
// then checks for leaked goroutines (only when everything passed: a failed
// test may legitimately leave a hung node behind). memberlist's Shutdown
// does not wait for its probe goroutine, which may finish its current
// round (about a second under load) afterwards, and goleak's own retries
// give up after about half a second: the check is retried for up to
// leakGrace, as node/membership's TestMain does. A goroutine that never
// exits still fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	removeBuiltBinary()
	if code == 0 {
		const leakGrace = 20 * time.Second
		for deadline := time.Now().Add(leakGrace); ; {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: goroutines left %v after the tests: %v\n", leakGrace, err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond) // polling for goroutines to exit; there is no event to wait on
		}
	}
	os.Exit(code)
}
