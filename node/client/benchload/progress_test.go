package benchload

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A line that fell due before the stop is printed even if the printer's
// goroutine never saw its tick (a loaded machine): a run of at least a
// second shows a line, and no line is made up for a shorter one.
func TestProgress_DueLinePrintedAtStop(t *testing.T) {
	var c counters
	c.done.Add(7)
	var due bytes.Buffer
	startProgressSince(&due, "write", &c, time.Now().Add(-1500*time.Millisecond)).stop()
	if got := due.String(); !strings.HasPrefix(got, "write ") || !strings.Contains(got, "total 7") {
		t.Fatalf("stopped 1.5 s into the run: %q, want a progress line", got)
	}
	var early bytes.Buffer
	start := time.Now()
	startProgressSince(&early, "write", &c, start).stop()
	if early.Len() != 0 && time.Since(start) < time.Second {
		t.Fatalf("stopped at once: %q, want no line", early.String())
	}
}
