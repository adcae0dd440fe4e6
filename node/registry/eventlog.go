package registry

// eventLog is the retained window of the replicated event log: the newest
// limit events. They live in a ring that grows like a slice until it holds
// limit events and is then overwritten in place, oldest first, so an
// append in steady state allocates and copies nothing but the event (a
// slice with a dead prefix had to be cloned every limit/2 events: a
// multi-megabyte allocation, clear and copy of pointerful memory on every
// replica). Positions are dense: the i-th retained event, oldest first,
// has position oldest()+i. Pruning depends only on the count, so every
// replica with the same window prunes identically.
type eventLog struct {
	limit int
	// ring holds the retained events. Until it is full (len < limit) they
	// are in order from ring[0]; once full, the oldest is ring[start] and
	// the order wraps around the end.
	ring  []Event
	start int
	last  uint64 // position of the newest event ever appended
	byID  map[string]uint64
}

func newEventLog(limit int) eventLog {
	return eventLog{limit: limit, byID: map[string]uint64{}}
}

// minRingCap is the first allocation of the ring.
const minRingCap = 64

func (l *eventLog) len() int { return len(l.ring) }

func (l *eventLog) oldest() uint64 {
	if len(l.ring) == 0 {
		return 0
	}
	return l.ring[l.start].Position
}

// position returns the position of the retained event with that id.
func (l *eventLog) position(id string) (uint64, bool) {
	p, ok := l.byID[id]
	return p, ok
}

// appendAll assigns positions to evs, appends them and prunes the window.
// It returns how many were appended. The index is updated as it always
// was, all new ids first and then the pruned ones removed, so ids restored
// from an older snapshot index identically whatever they are.
func (l *eventLog) appendAll(evs []Event) int {
	for i := range evs {
		l.last++
		evs[i].Position = l.last
		l.byID[evs[i].ID] = l.last
	}
	keep := evs
	if over := len(l.ring) + len(evs) - l.limit; over > 0 {
		old := min(over, len(l.ring))
		for i := range old {
			delete(l.byID, l.at(i).ID)
		}
		// More new events than the window holds: the first of them are
		// pruned as soon as appended.
		for _, ev := range evs[:over-old] {
			delete(l.byID, ev.ID)
		}
		keep = evs[over-old:]
	}
	for i := range keep {
		l.push(&keep[i])
	}
	return len(evs)
}

// push stores ev as the newest event, overwriting the oldest one when the
// ring is full (appendAll has already removed it from byID).
func (l *eventLog) push(ev *Event) {
	if len(l.ring) < l.limit {
		if len(l.ring) == cap(l.ring) {
			grown := make([]Event, len(l.ring), min(max(2*cap(l.ring), minRingCap), l.limit))
			copy(grown, l.ring)
			l.ring = grown
		}
		l.ring = append(l.ring, *ev)
		return
	}
	l.ring[l.start] = *ev
	l.start++
	if l.start == len(l.ring) {
		l.start = 0
	}
}

// at returns the i-th retained event, oldest first.
func (l *eventLog) at(i int) *Event {
	i += l.start
	if i >= len(l.ring) {
		i -= len(l.ring)
	}
	return &l.ring[i]
}

// copyFrom copies retained events into dst, starting from the i-th.
func (l *eventLog) copyFrom(dst []Event, i int) {
	i += l.start
	if i >= len(l.ring) {
		i -= len(l.ring)
	}
	n := copy(dst, l.ring[i:])
	copy(dst[n:], l.ring)
}

// all returns a copy of the retained events, oldest first, as stored:
// lazy Data not rendered (a snapshot renders it in Persist, off raft's
// FSM goroutine).
func (l *eventLog) all() []Event {
	out := make([]Event, len(l.ring))
	l.copyFrom(out, 0)
	return out
}

// after returns up to limit events with Position > pos (limit <= 0: all).
// Event values are copies; their slices are never modified after append.
func (l *eventLog) after(pos uint64, limit int) []Event {
	if len(l.ring) == 0 || pos >= l.last {
		return nil
	}
	skip := 0
	if first := l.oldest(); pos >= first {
		skip = int(pos - first + 1)
	}
	n := len(l.ring) - skip
	if limit > 0 && n > limit {
		n = limit
	}
	out := make([]Event, n)
	l.copyFrom(out, skip)
	for i := range out {
		out[i].render()
	}
	return out
}

// restore makes events, dense and oldest first, the retained window (the
// newest limit of them).
func (l *eventLog) restore(events []Event) {
	if len(events) > l.limit {
		events = append([]Event(nil), events[len(events)-l.limit:]...)
	}
	l.ring, l.start = events, 0
	for i := range events {
		l.byID[events[i].ID] = events[i].Position
	}
}
