package registry

import (
	"fmt"
	"testing"
)

// BenchmarkEventLog_CheckAndAppend: what the window costs one event of an
// update, the window full (10,000 events): the id checked (a miss, as a
// fresh proposer id is), appended, and the oldest event pruned.
func BenchmarkEventLog_CheckAndAppend(b *testing.B) {
	const window = 10_000
	l := newEventLog(window)
	ids := make([]string, window+b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("01HF7YAT9C%016d", i)
	}
	for i := range window {
		l.appendAll([]Event{{ID: ids[i]}})
	}
	var ev [1]Event
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := ids[window+i]
		if _, ok := l.position(id); ok {
			b.Fatal("fresh id found")
		}
		ev[0] = Event{ID: id}
		l.appendAll(ev[:])
	}
}
