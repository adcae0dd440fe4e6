package registry

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// sliceLog is the event window as it was before the ring: a slice with a
// dead prefix, compacted once the prefix dominates. The ring must behave
// exactly like it (positions, byID, after, snapshot), duplicate ids from
// an old snapshot included.
type sliceLog struct {
	limit  int
	events []Event
	head   int
	last   uint64
	byID   map[string]uint64
}

func (l *sliceLog) appendAll(evs []Event) {
	for i := range evs {
		l.last++
		evs[i].Position = l.last
		l.byID[evs[i].ID] = l.last
		l.events = append(l.events, evs[i])
	}
	for len(l.events)-l.head > l.limit {
		delete(l.byID, l.events[l.head].ID)
		l.head++
	}
	if l.head > 0 && l.head >= len(l.events)/2 {
		l.events = slices.Clone(l.events[l.head:])
		l.head = 0
	}
}

func (l *sliceLog) after(pos uint64, limit int) []Event {
	live := l.events[l.head:]
	if len(live) == 0 || pos >= l.last {
		return nil
	}
	start := 0
	if first := live[0].Position; pos >= first {
		start = int(pos - first + 1)
	}
	end := len(live)
	if limit > 0 && end-start > limit {
		end = start + limit
	}
	return slices.Clone(live[start:end])
}

func (l *sliceLog) oldest() uint64 {
	if len(l.events) == l.head {
		return 0
	}
	return l.events[l.head].Position
}

func (l *sliceLog) restore(events []Event) {
	if len(events) > l.limit {
		events = events[len(events)-l.limit:]
	}
	l.events, l.head = events, 0
	for i := range events {
		l.byID[events[i].ID] = events[i].Position
	}
}

func batch(first, n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{ID: fmt.Sprintf("ev-%06d", first+i), Type: "t", Data: []byte(fmt.Sprint(first + i))}
	}
	return evs
}

// sameLog checks everything a reader of the window can observe.
func sameLog(t *testing.T, step string, got *eventLog, want *sliceLog) {
	t.Helper()
	if got.oldest() != want.oldest() || got.last != want.last || got.len() != len(want.events)-want.head {
		t.Fatalf("%s: oldest/last/len %d/%d/%d, want %d/%d/%d", step, got.oldest(), got.last, got.len(),
			want.oldest(), want.last, len(want.events)-want.head)
	}
	if !maps.Equal(got.byID, want.byID) {
		t.Fatalf("%s: byID %v, want %v", step, got.byID, want.byID)
	}
	for _, pos := range []uint64{0, want.oldest() - 1, want.oldest(), want.oldest() + 1, (want.oldest() + want.last) / 2, want.last - 1, want.last, want.last + 1} {
		for _, limit := range []int{0, 1, 3, got.limit} {
			if g, w := got.after(pos, limit), want.after(pos, limit); !reflect.DeepEqual(g, w) {
				t.Fatalf("%s: after(%d, %d) = %d events from %v, want %d from %v", step, pos, limit, len(g), positions(g), len(w), positions(w))
			}
		}
	}
	if g, w := got.all(), want.after(0, 0); len(g)+len(w) > 0 && !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: all() = %v, want %v", step, positions(g), positions(w))
	}
}

func positions(evs []Event) []uint64 {
	out := make([]uint64, len(evs))
	for i := range evs {
		out[i] = evs[i].Position
	}
	return out
}

// TestEventLog_MatchesSliceLog: random batches (empty, single, larger than
// the window) wrap the ring many times; after each one the ring and the
// old slice agree on everything (ids used twice included), and a snapshot of the ring restored into
// a fresh log (and into the old slice) agrees too.
func TestEventLog_MatchesSliceLog(t *testing.T) {
	for _, limit := range []int{1, 2, 5, 64, 100, 150} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(limit), 7))
			got := newEventLog(limit)
			want := &sliceLog{limit: limit, byID: map[string]uint64{}}
			next := 0
			for step := range 300 {
				n := rng.IntN(4)
				switch rng.IntN(20) {
				case 0:
					n = limit + rng.IntN(2*limit+1) // more than the window
				case 1:
					n = 0
				}
				evs := batch(next, n)
				next += n
				if n > 0 && next > n && rng.IntN(5) == 0 {
					// An id used before (retained or pruned): eventID never
					// does this, but a window restored from any snapshot
					// must index like the old code did.
					evs[rng.IntN(n)].ID = fmt.Sprintf("ev-%06d", rng.IntN(next-n))
				}
				if appended := got.appendAll(slices.Clone(evs)); appended != n {
					t.Fatalf("appendAll returned %d, want %d", appended, n)
				}
				want.appendAll(evs)
				sameLog(t, fmt.Sprintf("step %d (+%d)", step, n), &got, want)

				if step%37 == 0 {
					// Snapshot/restore round trip, then carry on appending
					// to the restored logs.
					snap := got.all()
					got = newEventLog(limit)
					got.last = want.last
					got.restore(slices.Clone(snap))
					wantSnap := want.after(0, 0)
					want = &sliceLog{limit: limit, last: want.last, byID: map[string]uint64{}}
					want.restore(wantSnap)
					sameLog(t, fmt.Sprintf("step %d restored", step), &got, want)
				}
			}
		})
	}
}

// TestEventLog_Wraps: a full ring overwrites its oldest events; after()
// reads across the end of the ring in order, and byID holds exactly the
// retained ids.
func TestEventLog_Wraps(t *testing.T) {
	l := newEventLog(4)
	l.appendAll(batch(1, 4)) // positions 1-4, ring full, start 0
	if l.start != 0 || l.oldest() != 1 {
		t.Fatalf("full ring: start %d oldest %d", l.start, l.oldest())
	}
	l.appendAll(batch(5, 2)) // 5, 6 overwrite 1, 2
	if l.start != 2 || l.oldest() != 3 || l.last != 6 || len(l.ring) != 4 {
		t.Fatalf("wrapped ring: start %d oldest %d last %d len %d", l.start, l.oldest(), l.last, len(l.ring))
	}
	if got := positions(l.after(0, 0)); !slices.Equal(got, []uint64{3, 4, 5, 6}) {
		t.Errorf("after(0) across the wrap = %v", got)
	}
	if got := positions(l.after(3, 2)); !slices.Equal(got, []uint64{4, 5}) {
		t.Errorf("after(3, 2) across the wrap = %v", got)
	}
	if got := positions(l.after(4, 0)); !slices.Equal(got, []uint64{5, 6}) {
		t.Errorf("after(4) in the wrapped part = %v", got)
	}
	if got := l.after(6, 0); got != nil {
		t.Errorf("after(last) = %v, want nil", got)
	}
	for i, id := range []string{"ev-000001", "ev-000002"} {
		if _, ok := l.position(id); ok {
			t.Errorf("pruned event %d still indexed", i+1)
		}
	}
	for pos := uint64(3); pos <= 6; pos++ {
		if p, ok := l.position(fmt.Sprintf("ev-%06d", pos)); !ok || p != pos {
			t.Errorf("position of event %d: %d, %v", pos, p, ok)
		}
	}
	if len(l.byID) != 4 {
		t.Errorf("byID holds %d ids, want 4", len(l.byID))
	}
}

// TestEventLog_SteadyStateAllocatesNothing: once the ring is full, an
// append costs no allocation (the old slice cloned the window every
// limit/2 events).
func TestEventLog_SteadyStateAllocatesNothing(t *testing.T) {
	l := newEventLog(1000)
	l.appendAll(batch(0, 1000))
	evs := batch(1000, 5000)
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		l.appendAll(evs[i : i+1])
		i++
	})
	if allocs > 0 {
		t.Errorf("%.2f allocations per append to a full ring", allocs)
	}
}

// TestEventLog_GrowsToLimit: the ring never holds more than the window
// and its capacity stops at the limit.
func TestEventLog_GrowsToLimit(t *testing.T) {
	l := newEventLog(100)
	for i := range 250 {
		l.appendAll(batch(i, 1))
		if len(l.ring) > 100 || cap(l.ring) > 100 {
			t.Fatalf("after %d events: len %d cap %d", i+1, len(l.ring), cap(l.ring))
		}
	}
}
