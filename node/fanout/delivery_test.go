package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func msgEvent(n int, source string, agents ...string) registry.Event {
	return registry.Event{ID: fmt.Sprintf("M%025d", n), Type: "message_sent", Timestamp: int64(n), Source: source,
		Data: json.RawMessage(`{"messageId":"m` + strconv.Itoa(n) + `","payload":{"n":` + strconv.Itoa(n) + `}}`), AgentIDs: agents}
}

type overflowNote struct {
	SubscriptionID  string `json:"subscriptionId"`
	EventsDropped   int    `json:"eventsDropped"`
	OldestDroppedID string `json:"oldestDroppedId"`
	NewestDroppedID string `json:"newestDroppedId"`
	TotalDropped    int    `json:"totalDropped"`
	Recommendation  string `json:"recommendation"`
	Reason          string `json:"reason"`
	Closed          bool   `json:"closed"`
}

func overflows(t *testing.T, c *fakeConn) []overflowNote {
	t.Helper()
	var out []overflowNote
	for _, n := range c.notes() {
		if n.method == MethodOverflow {
			var o overflowNote
			if err := json.Unmarshal(n.params, &o); err != nil {
				t.Fatal(err)
			}
			out = append(out, o)
		}
	}
	return out
}

func TestOverflow_WarnThenClose(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	hs := newHarness(t, reg, func(c *Config) { c.QueueLimit = 4 })
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	hs.hub.PublishEphemeral(msgEvent(1, "x"))
	waitEvents(t, c, id, 1)

	// The connection is full: 4 events wait, 6 are dropped.
	c.set(true, -1)
	for i := 2; i <= 11; i++ {
		hs.hub.PublishEphemeral(msgEvent(i, "x"))
	}
	// It drains a little: the warning and two queued events go out, then it
	// is full again; new events overflow again before it caught up: closed.
	c.set(false, 3)
	eventually(t, testTimeout, func() error {
		if len(overflows(t, c)) != 1 {
			return fmt.Errorf("no warning yet")
		}
		return nil
	})
	w := overflows(t, c)[0]
	if w.SubscriptionID != id || w.EventsDropped != 6 || w.OldestDroppedID != msgEvent(6, "").ID ||
		w.NewestDroppedID != msgEvent(11, "").ID || w.Recommendation != "reduce_filter_scope" || w.Closed {
		t.Fatalf("warning %+v", w)
	}
	checkDense(t, waitEvents(t, c, id, 3), 1, []string{msgEvent(1, "").ID, msgEvent(2, "").ID, msgEvent(3, "").ID})

	for i := 12; i <= 20; i++ {
		hs.hub.PublishEphemeral(msgEvent(i, "x"))
	}
	if hs.hub.HasSubscribers() {
		t.Fatal("subscription still open after dropping again")
	}
	c.set(false, -1)
	eventually(t, testTimeout, func() error {
		if o := overflows(t, c); len(o) != 2 || !o[1].Closed {
			return fmt.Errorf("final notice not delivered: %+v", o)
		}
		return nil
	})
	final := overflows(t, c)[1]
	if final.Recommendation != "resubscribe" || final.TotalDropped < 7 {
		t.Errorf("final notice %+v", final)
	}
	eventually(t, testTimeout, func() error {
		if s, _ := reg.Session("s1"); len(s.Subscriptions) != 0 {
			return fmt.Errorf("closed subscription not removed from the registry")
		}
		return nil
	})
}

func TestOverflow_CloseAfterStall(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	var mu sync.Mutex
	now := time.UnixMilli(1_800_000_000_000)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	hs := newHarness(t, reg, func(c *Config) { c.QueueLimit = 1; c.OverflowCloseAfter = time.Minute; c.Now = clock })
	c := hs.conn("s1")
	hs.subscribe(t, "s1", `{}`)
	c.set(true, -1)
	hs.hub.PublishEphemeral(msgEvent(1, "x"))
	hs.hub.PublishEphemeral(msgEvent(2, "x")) // dropped: episode starts
	if !hs.hub.HasSubscribers() {
		t.Fatal("closed too early")
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	eventually(t, testTimeout, func() error {
		if hs.hub.HasSubscribers() {
			return fmt.Errorf("stalled subscription not closed")
		}
		return nil
	})
}

func TestLaggingSubscriptionLosesNoLogEvents(t *testing.T) {
	reg := newFakeRegistry(1000)
	reg.addSession("slow", "p1")
	reg.addSession("fast", "p2")
	hs := newHarness(t, reg, func(c *Config) { c.QueueLimit = 1 })
	slow, fast := hs.conn("slow"), hs.conn("fast")
	slowID := hs.subscribe(t, "slow", `{}`)
	fastID := hs.subscribe(t, "fast", `{}`)
	slow.set(true, -1)
	var want []registry.Event
	for range 100 {
		want = append(want, reg.appendEvent("agent_state_changed", "a"))
	}
	// One stuck connection does not hold up the others.
	checkDense(t, waitEvents(t, fast, fastID, 100), 1, ids(want))
	if n := len(slow.events(t, slowID)); n != 0 {
		t.Fatalf("refusing connection got %d events", n)
	}
	slow.set(false, -1)
	checkDense(t, waitEvents(t, slow, slowID, 100), 1, ids(want))
	if o := overflows(t, slow); len(o) != 0 {
		t.Errorf("lag within the window reported as overflow: %+v", o)
	}
}

func TestLaggingBeyondWindowWarns(t *testing.T) {
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	hs := newHarness(t, reg, nil)
	hs.hub.mu.Lock()
	hs.hub.cache.limit = 1 // so the aged-out events are not still cached
	hs.hub.mu.Unlock()
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	c.set(true, -1)
	var all []registry.Event
	for range 25 {
		all = append(all, reg.appendEvent("agent_state_changed", "a"))
	}
	// One full round after the appends, while still refusing: a round of
	// Run that read an older window cannot straddle the unblocking below.
	hs.hub.step()
	c.set(false, -1)
	evs := waitEvents(t, c, id, 10)
	checkDense(t, evs, 1, ids(all[15:]))
	o := overflows(t, c)
	if len(o) != 1 || o[0].EventsDropped != 15 || o[0].Reason != "replay_window_exceeded" || o[0].Closed {
		t.Errorf("overflow %+v", o)
	}
}

func TestExcludeOwnEventsAndPayloads(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	reg.addAgent(registry.Agent{ID: "mine", SessionID: "s1"})
	reg.addAgent(registry.Agent{ID: "theirs", SessionID: "s2"})
	hs := newHarness(t, reg, nil)
	c := hs.conn("s1")
	plain := hs.subscribe(t, "s1", `{}`)
	withPayload := hs.subscribe(t, "s1", `{"options":{"includeMessagePayloads":true}}`)
	noOwn := hs.subscribe(t, "s1", `{"options":{"excludeOwnEvents":true}}`)

	hs.hub.PublishEphemeral(msgEvent(1, "p1"))     // from the subscriber's participant
	hs.hub.PublishEphemeral(msgEvent(2, "mine"))   // from an agent of its session
	hs.hub.PublishEphemeral(msgEvent(3, "theirs")) // from someone else

	checkDense(t, waitEvents(t, c, noOwn, 1), 1, []string{msgEvent(3, "").ID})
	all := []string{msgEvent(1, "").ID, msgEvent(2, "").ID, msgEvent(3, "").ID}
	for _, e := range waitEvents(t, c, plain, 3) {
		var d map[string]json.RawMessage
		if json.Unmarshal(e.Event.Data, &d) != nil || d["payload"] != nil || d["messageId"] == nil {
			t.Errorf("plain subscription data %s", e.Event.Data)
		}
	}
	evs := waitEvents(t, c, withPayload, 3)
	checkDense(t, evs, 1, all)
	for i, e := range evs {
		var d struct{ Payload struct{ N int } }
		if json.Unmarshal(e.Event.Data, &d) != nil || d.Payload.N != i+1 {
			t.Errorf("payload subscription data %s", e.Event.Data)
		}
	}
}

func TestActivationWaitsForReply(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	var mu sync.Mutex
	var pending []func()
	hs := newHarness(t, reg, func(c *Config) {
		c.AfterReply = func(_ context.Context, fn func()) bool {
			mu.Lock()
			defer mu.Unlock()
			pending = append(pending, fn)
			return true
		}
	})
	c := hs.conn("s1")
	prev := reg.appendEvent("agent_registered", "a")
	id := hs.subscribe(t, "s1", `{"fromEventId":"`+prev.ID+`"}`)
	ev := reg.appendEvent("agent_registered", "b")
	hs.hub.PublishEphemeral(msgEvent(1, "x"))
	hs.hub.step()
	if n := len(c.notes()); n != 0 {
		t.Fatalf("%d notifications before the reply was sent", n)
	}
	mu.Lock()
	for _, fn := range pending {
		fn()
	}
	mu.Unlock()
	checkDense(t, waitEvents(t, c, id, 2), 1, []string{msgEvent(1, "").ID, ev.ID})
}

func TestCursorFlushBatchedAndAck(t *testing.T) {
	reg := newFakeRegistry(1000)
	reg.addSession("s1", "p1")
	const flushEvery = 20 * time.Millisecond
	hs := newHarness(t, reg, func(c *Config) { c.CursorFlushInterval = flushEvery })
	c := hs.conn("s1")
	a := hs.subscribe(t, "s1", `{}`)
	b := hs.subscribe(t, "s1", `{"filter":{"eventTypes":["agent_registered"]}}`)
	start := time.Now()
	var all []registry.Event
	for range 200 {
		all = append(all, reg.appendEvent("agent_state_changed", "x"))
	}
	all = append(all, reg.appendEvent("agent_registered", "y"))
	waitEvents(t, c, a, 201)
	waitEvents(t, c, b, 1)
	cursorOf := func(id string) registry.Subscription {
		s, _ := reg.Session("s1")
		for _, sub := range s.Subscriptions {
			if sub.ID == id {
				return sub
			}
		}
		return registry.Subscription{}
	}
	eventually(t, testTimeout, func() error {
		if ca, cb := cursorOf(a), cursorOf(b); ca.CursorSeq != 201 || ca.CursorEventID != all[200].ID || cb.CursorSeq != 1 {
			return fmt.Errorf("cursors a=%+v b=%+v", ca, cb)
		}
		return nil
	})
	// At most one flush per interval while the events were delivered (a
	// loaded machine spreads them over more intervals), far fewer than
	// one per event.
	limit := min(max(10, int(time.Since(start)/flushEvery)+2), 100)
	if n := hs.prop.n(concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_CURSOR); n > limit {
		t.Errorf("%d cursor proposals for 201 events in %s: not batched (want at most %d)", n, time.Since(start), limit)
	}

	// An acknowledgement moves the persisted cursor to the acknowledged event.
	if err := hs.hub.Ack(context.Background(), "s1", json.RawMessage(`{"subscriptionId":"`+a+`","upToSequence":300}`)); rpcCode(err) == 0 {
		t.Error("ack beyond the last delivery accepted")
	}
	if err := hs.hub.Ack(context.Background(), "s1", json.RawMessage(`{"subscriptionId":"`+a+`","upToSequence":150}`)); err != nil {
		t.Fatal(err)
	}
	reg.appendEvent("agent_state_changed", "x")
	waitEvents(t, c, a, 202)
	eventually(t, testTimeout, func() error {
		if ca := cursorOf(a); ca.CursorSeq != 202 || ca.CursorEventID != all[149].ID {
			return fmt.Errorf("cursor after ack %+v, want seq 202 at %s", ca, all[149].ID)
		}
		return nil
	})
	// map/ack by event id, and acks never move the cursor back.
	if err := hs.hub.Ack(context.Background(), "s1", json.RawMessage(`{"subscriptionId":"`+a+`","eventId":"`+all[180].ID+`"}`)); err != nil {
		t.Fatal(err)
	}
	if err := hs.hub.Ack(context.Background(), "s1", json.RawMessage(`{"subscriptionId":"`+a+`","eventId":"`+all[170].ID+`"}`)); err != nil {
		t.Fatal(err)
	}
	reg.appendEvent("agent_state_changed", "x")
	waitEvents(t, c, a, 203)
	eventually(t, testTimeout, func() error {
		if ca := cursorOf(a); ca.CursorSeq != 203 || ca.CursorEventID != all[180].ID {
			return fmt.Errorf("cursor after map/ack %+v", ca)
		}
		return nil
	})
	if err := hs.hub.Ack(context.Background(), "s2", json.RawMessage(`{"subscriptionId":"`+a+`","upToSequence":1}`)); rpcCode(err) == 0 {
		t.Error("ack for another session's subscription accepted")
	}
}

func TestActivation_AfterReplyImmediateOrUnavailable(t *testing.T) {
	for name, hook := range map[string]func(context.Context, func()) bool{
		"runs at once": func(_ context.Context, fn func()) bool { fn(); return true },
		"unavailable":  func(context.Context, func()) bool { return false },
	} {
		t.Run(name, func(t *testing.T) {
			reg := newFakeRegistry(10)
			reg.addSession("s1", "p1")
			hs := newHarness(t, reg, func(c *Config) { c.AfterReply = hook })
			c := hs.conn("s1")
			id := hs.subscribe(t, "s1", `{}`)
			ev := reg.appendEvent("agent_registered", "a")
			checkDense(t, waitEvents(t, c, id, 1), 1, []string{ev.ID})
		})
	}
}

func TestActivation_Delay(t *testing.T) {
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	var mu sync.Mutex
	now := time.UnixMilli(1_800_000_000_000)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	hs := newHarness(t, reg, func(c *Config) { c.ActivationDelay = 25 * time.Millisecond; c.Now = clock })
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	ev := reg.appendEvent("agent_registered", "a")
	hs.hub.PublishEphemeral(msgEvent(1, "x"))
	hs.hub.step()
	if n := len(c.notes()); n != 0 {
		t.Fatalf("%d notifications within the activation delay", n)
	}
	mu.Lock()
	now = now.Add(30 * time.Millisecond)
	mu.Unlock()
	checkDense(t, waitEvents(t, c, id, 2), 1, []string{msgEvent(1, "").ID, ev.ID})
}

// TestOverflow_QueueBytes: a subscriber that never reads holds at most
// QueueBytes of large events; the rest are dropped and reported, whatever
// QueueLimit allows.
func TestOverflow_QueueBytes(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	big := func(n int) registry.Event {
		ev := msgEvent(n, "x")
		ev.Data = json.RawMessage(`{"messageId":"m` + strconv.Itoa(n) + `","payload":"` + strings.Repeat("z", 10_000) + `"}`)
		return ev
	}
	hs := newHarness(t, reg, func(c *Config) { c.QueueLimit = 1000; c.QueueBytes = 35_000 })
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	hs.hub.PublishEphemeral(msgEvent(1, "x"))
	waitEvents(t, c, id, 1)

	c.set(true, -1) // full from now on
	for i := 2; i <= 21; i++ {
		hs.hub.PublishEphemeral(big(i))
	}
	hs.hub.mu.Lock()
	var queued, bytes int
	for _, s := range hs.hub.subs {
		queued, bytes = len(s.queue), s.queueBytes
	}
	hs.hub.mu.Unlock()
	if queued != 3 || bytes > 35_000 {
		t.Fatalf("queued %d events, %d bytes; want 3 events within 35000 bytes", queued, bytes)
	}
	c.set(false, -1)
	eventually(t, testTimeout, func() error {
		if len(overflows(t, c)) != 1 {
			return fmt.Errorf("no overflow warning yet")
		}
		return nil
	})
	if w := overflows(t, c)[0]; w.EventsDropped != 17 {
		t.Fatalf("warning %+v, want 17 dropped", w)
	}
}

// With no subscription the hub neither reads nor encodes events; a
// subscription that arrives later still gets every new event.
func TestNoSubscribersNoEventWork(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	hs := newHarness(t, reg, nil)
	for range 20 {
		reg.appendEvent("agent_state_changed", "a")
	}
	hs.hub.step()
	hs.hub.mu.Lock()
	cached := len(hs.hub.cache.evs)
	hs.hub.mu.Unlock()
	if cached != 0 {
		t.Fatalf("%d events prepared with no subscription", cached)
	}
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	var want []registry.Event
	for range 5 {
		want = append(want, reg.appendEvent("agent_state_changed", "a"))
	}
	checkDense(t, waitEvents(t, c, id, 5), 1, ids(want))
}
