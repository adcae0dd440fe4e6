package registry

import (
	"encoding/json"
	"testing"

	"github.com/oklog/ulid/v2"
)

func TestAppendEvents_PositionsIDsAndSnapshot(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cAgentRegister, register("a1"))
	_, lastBefore := h.s.Window()
	notify := h.s.Notify()

	given := ulid.MustNew(1_700_000_000_123, nil).String()
	evs := []Event{
		{ID: given, Type: "x-test.one", Timestamp: 1_700_000_000_123, Source: "svc", Data: json.RawMessage(`{"n":1}`), AgentIDs: []string{"b", "a", "b"}},
		{ID: given, Type: "x-test.dup", Timestamp: 1_700_000_000_124, Source: "svc"},        // duplicate id: derived
		{ID: "not-a-ulid", Type: "x-test.bad", Timestamp: 1_700_000_000_125, Source: "svc"}, // derived
		{Type: "x-test.empty", Timestamp: 1_700_000_000_126, Source: "svc"},                 // derived
	}
	h.index++
	got := h.s.AppendEvents(h.index, evs)
	select {
	case <-notify:
	default:
		t.Fatal("AppendEvents did not wake Notify")
	}
	if len(got) != len(evs) {
		t.Fatalf("got %d events, want %d", len(got), len(evs))
	}
	seen := map[string]bool{}
	for i, ev := range got {
		if ev.Position != lastBefore+uint64(i)+1 {
			t.Errorf("event %d: position %d, want %d", i, ev.Position, lastBefore+uint64(i)+1)
		}
		if _, err := ulid.ParseStrict(ev.ID); err != nil || seen[ev.ID] {
			t.Errorf("event %d: id %q invalid or duplicate", i, ev.ID)
		}
		seen[ev.ID] = true
		if p, ok := h.s.PositionOf(ev.ID); !ok || p != ev.Position {
			t.Errorf("event %d: PositionOf = %d,%v", i, p, ok)
		}
	}
	if got[0].ID != given {
		t.Errorf("supplied unused ULID replaced: %s", got[0].ID)
	}
	if want := []string{"a", "b"}; len(got[0].AgentIDs) != 2 || got[0].AgentIDs[0] != want[0] || got[0].AgentIDs[1] != want[1] {
		t.Errorf("AgentIDs = %v, want %v", got[0].AgentIDs, want)
	}

	// Replicas that append the same events at the same index agree, and the
	// events survive a snapshot round trip.
	other := newHarness(t, 100)
	other.must(cAgentRegister, register("a1"))
	other.index++
	other.s.AppendEvents(other.index, evs)
	// register() stamps a fresh time per call; compare appended events only.
	if a, b := types(h.s.EventsAfter(lastBefore, 0)), types(other.s.EventsAfter(lastBefore, 0)); len(a) != len(b) {
		t.Fatalf("replicas differ: %v vs %v", a, b)
	}
	for i, ev := range other.s.EventsAfter(lastBefore, 0) {
		if ev.ID != got[i].ID {
			t.Errorf("replica event %d id %s, want %s", i, ev.ID, got[i].ID)
		}
	}
	restored := newHarness(t, 100)
	commit, err := restored.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if dump(restored.s) != dump(h.s) {
		t.Fatal("snapshot round trip changed appended events")
	}
}

func TestAppendEvents_EmptyIsNoop(t *testing.T) {
	h := newHarness(t, 10)
	notify := h.s.Notify()
	if got := h.s.AppendEvents(1, nil); got != nil {
		t.Fatalf("got %v", got)
	}
	select {
	case <-notify:
		t.Fatal("empty append woke Notify")
	default:
	}
}
