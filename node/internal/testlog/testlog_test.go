package testlog

import (
	"testing"
)

// A write after the test's cleanups ran is dropped instead of reaching
// the finished test's output (which panics once every test completed).
func TestOutput_DropsWritesAfterCleanup(t *testing.T) {
	var w *detachable
	t.Run("inner", func(t *testing.T) {
		w = Output(t).(*detachable)
		if _, err := w.Write([]byte("during the test\n")); err != nil {
			t.Fatal(err)
		}
	})
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
