package registry

import (
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestLazyStateChange_SameAsEager: agent_state_changed events keep their
// payload's facts in the window and render Data when read
// (lazydata.go). What a reader gets (EventsAfter), what a snapshot
// writes and what a replica restored from it holds must be the bytes the
// eager rendering wrote: json.Marshal of the map payload, reasons and
// states with characters that need escaping included. Events with the
// window wrapped around are read too, and reads in between must not
// change what later reads see.
func TestLazyStateChange_SameAsEager(t *testing.T) {
	h := newHarness(t, 16)
	h.must(cSessionOpen, openSession("sess1", "p1", "", 0))
	h.must(cSessionOpen, openSession("sess2", "p2", "", 0))
	h.must(cAgentRegister, register("a<1>", inSession("sess1", "p1")))
	type change struct{ id, prev, cur, reason string }
	var want []change
	prev := StateRegistered
	reasons := []string{"", "plain", `q"uote\ & <tag>`, "line\nsep\u2028\x01", "日本"}
	states := []string{StateBusy, StateIdle, StateActive}
	for i := range 40 {
		cur, reason := states[i%len(states)], reasons[i%len(reasons)]
		h.must(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a<1>", State: proto.String(cur), Reason: reason})
		want = append(want, change{"a<1>", prev, cur, reason})
		prev = cur
		if i%7 == 3 { // a read in between renders copies only
			_ = h.s.EventsAfter(0, 0)
		}
	}
	// A state change from reclaim: the agent moves to another session.
	h.must(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a<1>", SetOwner: true})
	h.must(cAgentRegister, register("a<1>", inSession("sess2", "p1")))

	mapForm := func(c change) []byte {
		p := map[string]any{"agentId": c.id, "previous": c.prev, "current": c.cur}
		if c.reason != "" {
			p["reason"] = c.reason
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	evs := h.s.EventsAfter(0, 0)
	if len(evs) != 16 {
		t.Fatalf("%d events in the window, want 16", len(evs))
	}
	lazyInWindow := 0
	for i := range h.s.d.events.len() {
		if ev := h.s.d.events.at(i); ev.lazyData() {
			lazyInWindow++
			if ev.Data != nil {
				t.Fatalf("lazy event %s holds Data %s", ev.ID, ev.Data)
			}
		}
	}
	if lazyInWindow == 0 {
		t.Fatal("no event in the window is lazy: the test no longer tests anything")
	}
	// The updates' events are the window's oldest ones, in order.
	k := len(want)
	var gotUpdates []Event
	for _, ev := range evs {
		if ev.change.set {
			t.Fatalf("event %s handed out with its payload unrendered", ev.ID)
		}
		if ev.Type == EventAgentStateChanged {
			gotUpdates = append(gotUpdates, ev)
		}
	}
	if len(gotUpdates) < 10 {
		t.Fatalf("only %d state changes in the window", len(gotUpdates))
	}
	// The last state change is the reclaim's (the orphaning emits
	// agent_orphaned); the ones before are the newest updates.
	last := gotUpdates[len(gotUpdates)-1]
	if got, exp := string(last.Data), string(mapForm(change{"a<1>", StateOrphaned, prev, "reclaimed by register"})); got != exp {
		t.Fatalf("reclaim's state change: Data %s, eager rendering %s", got, exp)
	}
	for i, ev := range gotUpdates {
		if ev.Data == nil {
			t.Fatalf("state change %s has no Data", ev.ID)
		}
		if i < len(gotUpdates)-1 {
			w := want[k-(len(gotUpdates)-1)+i]
			if got, exp := string(ev.Data), string(mapForm(w)); got != exp {
				t.Fatalf("state change %d: Data %s, eager rendering %s", i, got, exp)
			}
		}
		if got := ev.AgentIDs; len(got) != 1 || got[0] != "a<1>" {
			t.Fatalf("subjects %v", got)
		}
	}
	// A replica restored from this one's snapshot has every event with its
	// Data written out: what it hands out must be identical.
	dst := newHarness(t, 16)
	commit, err := dst.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if got := dst.s.EventsAfter(0, 0); !reflect.DeepEqual(got, evs) {
		t.Fatalf("restored replica's events differ:\n got %+v\nwant %+v", got, evs)
	}
	if again := h.s.EventsAfter(0, 0); !reflect.DeepEqual(again, evs) {
		t.Fatal("a second read differs from the first")
	}
	if dump(dst.s) != dump(h.s) {
		t.Fatal("restored replica differs")
	}
}
