package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestAttach_NodeChangeContinuesNumbering: a session subscribed on node A
// detaches (its cursor is flushed), events happen while it is away, and it
// reconnects to node B: B replays what it missed with the same
// subscription id, numbering on from the cursor.
func TestAttach_NodeChangeContinuesNumbering(t *testing.T) {
	reg := newFakeRegistry(1000)
	reg.addSession("s1", "p1")
	nodeA := newHarness(t, reg, nil)
	ca := nodeA.conn("s1")
	id := nodeA.subscribe(t, "s1", `{"filter":{"eventTypes":["agent_state_changed"]}}`)
	var all []registry.Event
	for range 5 {
		all = append(all, reg.appendEvent("agent_state_changed", "a"))
	}
	checkDense(t, waitEvents(t, ca, id, 5), 1, ids(all))

	nodeA.hub.Detach("s1")
	eventually(t, testTimeout, func() error {
		if s, _ := reg.Session("s1"); len(s.Subscriptions) != 1 || s.Subscriptions[0].CursorSeq != 5 {
			return fmt.Errorf("cursor not flushed at detach: %+v", s.Subscriptions)
		}
		return nil
	})
	for range 5 {
		all = append(all, reg.appendEvent("agent_state_changed", "a"))
		reg.appendEvent("scope_created")
	}

	nodeB := newHarness(t, reg, func(c *Config) { c.NodeID = "n2" })
	cb := nodeB.conn("s1")
	if err := nodeB.hub.Attach(context.Background(), "s1", 1); err != nil {
		t.Fatal(err)
	}
	all = append(all, reg.appendEvent("agent_state_changed", "a")) // live after the replay
	checkDense(t, waitEvents(t, cb, id, 6), 6, ids(all[5:]))
	if n := len(ca.events(t, id)); n != 5 {
		t.Errorf("detached node A delivered %d events, want 5", n)
	}
	// Attaching again is a no-op for subscriptions already delivering.
	if err := nodeB.hub.Attach(context.Background(), "s1", 1); err != nil {
		t.Fatal(err)
	}
	reg.appendEvent("agent_state_changed", "a")
	evs := waitEvents(t, cb, id, 7)
	if len(evs) != 7 || evs[6].SequenceNumber != 12 {
		t.Errorf("after a second Attach: %d events, last seq %d", len(evs), evs[len(evs)-1].SequenceNumber)
	}
}

// TestAttach_AfterNodeLossIsAtLeastOnce: node A dies without flushing its
// last deliveries; node B replays from the last persisted cursor, so the
// client sees those events again (same eventIds) and nothing is lost.
func TestAttach_AfterNodeLossIsAtLeastOnce(t *testing.T) {
	reg := newFakeRegistry(1000)
	reg.addSession("s1", "p1")
	nodeA := newHarness(t, reg, nil)
	ca := nodeA.conn("s1")
	id := nodeA.subscribe(t, "s1", `{}`)
	var all []registry.Event
	for range 3 {
		all = append(all, reg.appendEvent("agent_registered", "a"))
	}
	waitEvents(t, ca, id, 3)
	nodeA.hub.flushCursors(context.Background()) // cursor at seq 3
	for range 2 {
		all = append(all, reg.appendEvent("agent_registered", "a"))
	}
	waitEvents(t, ca, id, 5) // delivered, never flushed: node A "dies" here

	nodeB := newHarness(t, reg, nil)
	cb := nodeB.conn("s1")
	if err := nodeB.hub.Attach(context.Background(), "s1", 1); err != nil {
		t.Fatal(err)
	}
	checkDense(t, waitEvents(t, cb, id, 2), 4, ids(all[3:]))
}

func TestAttach_CursorAgedOut(t *testing.T) {
	reg := newFakeRegistry(5)
	reg.addSession("s1", "p1")
	nodeA := newHarness(t, reg, nil)
	id := nodeA.subscribe(t, "s1", `{}`)
	reg.appendEvent("agent_registered", "a")
	waitEvents(t, nodeA.conn("s1"), id, 1)
	nodeA.hub.Detach("s1")
	eventually(t, testTimeout, func() error {
		if s, _ := reg.Session("s1"); s.Subscriptions[0].CursorSeq != 1 {
			return errors.New("cursor not flushed")
		}
		return nil
	})
	var all []registry.Event
	for range 12 {
		all = append(all, reg.appendEvent("agent_registered", "a"))
	}
	nodeB := newHarness(t, reg, nil)
	cb := nodeB.conn("s1")
	if err := nodeB.hub.Attach(context.Background(), "s1", 1); err != nil {
		t.Fatal(err)
	}
	checkDense(t, waitEvents(t, cb, id, 5), 2, ids(all[7:]))
	if o := overflows(t, cb); len(o) != 1 || o[0].Reason != "replay_window_exceeded" {
		t.Errorf("overflow notices %+v", o)
	}
	if err := nodeB.hub.Attach(context.Background(), "nope", 1); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("unknown session: %v", err)
	}
}

func TestDetach_QuickReattachKeepsNumbering(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	hs := newHarness(t, reg, nil)
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	reg.appendEvent("agent_registered", "a")
	reg.appendEvent("agent_registered", "a")
	waitEvents(t, c, id, 2)
	hs.prop.mu.Lock()
	hs.prop.err = errors.New("no leader") // the detach flush fails
	hs.prop.mu.Unlock()
	hs.hub.Detach("s1")
	hs.hub.flushCursors(context.Background())
	hs.prop.mu.Lock()
	hs.prop.err = nil
	hs.prop.mu.Unlock()
	if err := hs.hub.Attach(context.Background(), "s1", 1); err != nil {
		t.Fatal(err)
	}
	ev := reg.appendEvent("agent_registered", "a")
	evs := waitEvents(t, c, id, 5) // 2 live + the 2 replayed from the unflushed cursor + 1 new
	if last := evs[len(evs)-1]; last.EventID != ev.ID || last.SequenceNumber != 5 {
		t.Errorf("last event %s seq %d", last.EventID, last.SequenceNumber)
	}
	for i, e := range evs {
		if e.SequenceNumber != uint64(i+1) {
			t.Fatalf("sequence numbers %v went back after reattach", evs)
		}
	}
	// The failed flush is retried: the cursor gets persisted eventually.
	hs.hub.flushCursors(context.Background())
	if s, _ := reg.Session("s1"); s.Subscriptions[0].CursorSeq < 2 {
		t.Errorf("cursor not persisted after retry: %+v", s.Subscriptions[0])
	}
}

func TestReplay(t *testing.T) {
	reg := newFakeRegistry(50)
	reg.addSession("s1", "p1")
	var all []registry.Event
	for i := range 60 {
		typ := "agent_state_changed"
		if i%2 == 0 {
			typ = "agent_registered"
		}
		all = append(all, reg.appendEvent(typ, "a"))
	}
	hs := newHarness(t, reg, nil)
	replay := func(params string) (*ReplayResult, error) {
		res, err := hs.hub.Replay(context.Background(), "s1", json.RawMessage(params))
		if err != nil {
			return nil, err
		}
		return res.(*ReplayResult), nil
	}
	page, err := replay(`{"afterEventId":"` + all[20].ID + `","limit":5,"filter":{"eventTypes":["agent.registered"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		got = append(got, e.EventID)
		var ev struct{ ID, Type string }
		if json.Unmarshal(e.Event, &ev) != nil || ev.ID != e.EventID || ev.Type != "agent_registered" || e.Timestamp == 0 {
			t.Errorf("replayed %+v", e)
		}
	}
	if want := ids([]registry.Event{all[22], all[24], all[26], all[28], all[30]}); fmt.Sprint(got) != fmt.Sprint(want) || !page.HasMore {
		t.Errorf("page %v hasMore=%v, want %v true", got, page.HasMore, want)
	}
	// Last page: no more.
	page, err = replay(`{"afterEventId":"` + all[55].ID + `"}`)
	if err != nil || len(page.Events) != 4 || page.HasMore {
		t.Errorf("tail page %+v %v", page, err)
	}
	// Time range, inclusive.
	page, err = replay(fmt.Sprintf(`{"fromTimestamp":%d,"toTimestamp":%d}`, all[30].Timestamp, all[32].Timestamp))
	if err != nil || len(page.Events) != 3 || page.Events[0].EventID != all[30].ID {
		t.Errorf("time range page %+v %v", page, err)
	}
	// Default limit 100 and max 1000 (the window holds 50 here).
	page, err = replay(`{"limit":5000}`)
	if err != nil || len(page.Events) != 50 || page.HasMore {
		t.Errorf("big limit: %d events %v", len(page.Events), err)
	}
	for params, code := range map[string]int{
		`{"afterEventId":"` + all[2].ID + `"}`:                rpc.CodeExhausted,
		fmt.Sprintf(`{"fromTimestamp":%d}`, all[0].Timestamp): rpc.CodeExhausted,
		`{"limit":0}`:                          rpc.CodeInvalidParams,
		`{"limit":"x"}`:                        rpc.CodeInvalidParams,
		`{"afterEventId":"nope"}`:              rpc.CodeInvalidParams,
		`{"fromTimestamp":10,"toTimestamp":5}`: rpc.CodeInvalidParams,
		`{"filter":{"bogus":1}}`:               rpc.CodeInvalidParams,
	} {
		if _, err := replay(params); rpcCode(err) != code {
			t.Errorf("%s: err %v, want %d", params, err, code)
		}
	}
	if n := hs.prop.n(concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD); n != 0 {
		t.Error("replay proposed something")
	}
}
