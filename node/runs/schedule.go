package runs

import "container/heap"

type entryKind uint8

const (
	entryTimer entryKind = iota + 1 // propose timer_fired
	entrySend                       // retry sending a task
)

// entry is one scheduled action of the driver. Entries are never removed
// early: an entry whose gen no longer matches its task or timer is stale
// and skipped when it comes due.
type entry struct {
	at   int64 // ms since the epoch
	key  string
	kind entryKind
	gen  uint64
}

// schedule is a min-heap of entries by time. Only the driver loop uses it.
type schedule struct{ h entryHeap }

func (s *schedule) push(e entry) { heap.Push(&s.h, e) }

// next returns the earliest entry's time.
func (s *schedule) next() (int64, bool) {
	if len(s.h) == 0 {
		return 0, false
	}
	return s.h[0].at, true
}

// popDue removes and returns the earliest entry if it is due at now.
func (s *schedule) popDue(now int64) (entry, bool) {
	if len(s.h) == 0 || s.h[0].at > now {
		return entry{}, false
	}
	return heap.Pop(&s.h).(entry), true
}

type entryHeap []entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
