// Package testlog gives tests a log destination that a server may keep
// writing to after the test ended. A straggler (a timer, a goroutine
// finishing its round after Shutdown) writing to a finished test's
// t.Output() panics once every test has completed ("Write called after
// TestX has completed"), taking the whole package's run down.
package testlog

import (
	"io"
	"sync"
	"testing"
)

// Output returns a writer to tb.Output() that drops writes once tb's
// cleanups have run. Call it before starting what logs: its cleanup,
// registered first, then runs after theirs (cleanups run last first), so
// the shutdown's own logs still reach the test's output.
func Output(tb testing.TB) io.Writer {
	w := &detachable{w: tb.Output()}
	tb.Cleanup(func() {
		w.mu.Lock()
		w.w = nil
		w.mu.Unlock()
	})
	return w
}

// detachable forwards to w until w is cleared.
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
