package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestSubscribe_LiveDenseSequence(t *testing.T) {
	reg := newFakeRegistry(1000)
	reg.addSession("s1", "p1")
	reg.appendEvent("agent_registered", "old") // before the subscription: not delivered
	hs := newHarness(t, reg, nil)
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{"filter":{"eventTypes":["agent.state.changed"]}}`)
	if hs.prop.n(concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD) != 1 {
		t.Fatal("SUBSCRIPTION_ADD not proposed")
	}
	var want []registry.Event
	for i := range 20 {
		ev := reg.appendEvent("agent_state_changed", "a"+strconv.Itoa(i))
		want = append(want, ev)
		reg.appendEvent("agent_registered", "x") // filtered out
	}
	evs := waitEvents(t, c, id, len(want))
	checkDense(t, evs, 1, ids(want))
	e := evs[0]
	if e.Event.ID != want[0].ID || e.Event.Type != "agent_state_changed" || e.Event.Timestamp != want[0].Timestamp ||
		e.Event.Source != "p-src" || string(e.Event.Data) != string(want[0].Data) || e.Timestamp == 0 {
		t.Errorf("notification %+v does not carry event %+v", e, want[0])
	}
}

func TestSubscribe_ReplayThenLiveNoGapNoDup(t *testing.T) {
	for _, key := range []string{"fromEventId", "replayFrom"} {
		t.Run(key, func(t *testing.T) {
			reg := newFakeRegistry(10_000)
			reg.addSession("s1", "p1")
			var all []registry.Event
			for range 50 {
				all = append(all, reg.appendEvent("agent_state_changed", "a"))
			}
			hs := newHarness(t, reg, nil)
			c := hs.conn("s1")
			start := all[9].ID

			// Events keep being appended while the subscription is made.
			var wg sync.WaitGroup
			var mu sync.Mutex
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					ev := reg.appendEvent("agent_state_changed", "a")
					mu.Lock()
					all = append(all, ev)
					mu.Unlock()
				}
			}()
			id := hs.subscribe(t, "s1", `{"`+key+`":"`+start+`"}`)
			wg.Wait()
			want := ids(all[10:])
			evs := waitEvents(t, c, id, len(want))
			checkDense(t, evs, 1, want)
		})
	}
}

func TestSubscribe_ReplayFromTimestamp(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	var all []registry.Event
	for range 10 {
		all = append(all, reg.appendEvent("agent_state_changed", "a"))
	}
	hs := newHarness(t, reg, nil)
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{"replayFrom":`+strconv.FormatInt(all[4].Timestamp, 10)+`}`)
	checkDense(t, waitEvents(t, c, id, 6), 1, ids(all[4:]))
}

func TestSubscribe_ReplayWindowExceeded(t *testing.T) {
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	var all []registry.Event
	for range 30 {
		all = append(all, reg.appendEvent("agent_state_changed", "a"))
	}
	hs := newHarness(t, reg, nil)
	cases := []struct {
		params string
		code   int
		reason string
	}{
		{`{"fromEventId":"` + all[5].ID + `"}`, rpc.CodeExhausted, "replay_window_exceeded"},
		{`{"replayFrom":"` + all[0].ID + `"}`, rpc.CodeExhausted, "replay_window_exceeded"},
		{`{"replayFrom":` + strconv.FormatInt(all[3].Timestamp, 10) + `}`, rpc.CodeExhausted, "replay_window_exceeded"},
		{`{"fromEventId":"01JZZZZZZZZZZZZZZZZZZZZZZZ"}`, rpc.CodeInvalidParams, ""}, // never existed (newer than the window)
		{`{"fromEventId":"not-an-id"}`, rpc.CodeInvalidParams, ""},
		{`{"replayFrom":-5}`, rpc.CodeInvalidParams, ""},
		{`{"replayFrom":1,"fromEventId":"x"}`, rpc.CodeInvalidParams, ""},
	}
	for _, tc := range cases {
		_, err := hs.hub.Subscribe(context.Background(), "s1", 1, json.RawMessage(tc.params))
		var e *rpc.Error
		if !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%s: err = %v, want code %d", tc.params, err, tc.code)
			continue
		}
		if tc.reason != "" && e.Data.Details["reason"] != tc.reason {
			t.Errorf("%s: details %v", tc.params, e.Data.Details)
		}
	}
	// The newest retained event works, and nothing was proposed for the failures.
	hs.subscribe(t, "s1", `{"fromEventId":"`+all[25].ID+`"}`)
	if n := hs.prop.n(concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD); n != 1 {
		t.Errorf("%d SUBSCRIPTION_ADD proposed, want 1", n)
	}
}

func TestSubscribe_InvalidParams(t *testing.T) {
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	hs := newHarness(t, reg, nil)
	for params, field := range map[string]string{
		`[1]`: "params", `{"filter":{"colour":1}}`: "filter.colour", `{"options":[]}`: "options",
		`{"options":{"excludeOwnEvents":"yes"}}`: "options.excludeOwnEvents", `{"fromEventId":7}`: "fromEventId",
	} {
		_, err := hs.hub.Subscribe(context.Background(), "s1", 1, json.RawMessage(params))
		var e *rpc.Error
		if !errors.As(err, &e) || e.Code != rpc.CodeInvalidParams || e.Data.Details["field"] != field {
			t.Errorf("%s: err = %v, want -32602 on %s", params, err, field)
		}
	}
	if _, err := hs.hub.Subscribe(context.Background(), "nope", 1, nil); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("unknown session: %v", err)
	}
}

func TestUnsubscribe(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	reg.addSession("s2", "p2")
	hs := newHarness(t, reg, nil)
	c := hs.conn("s1")
	id := hs.subscribe(t, "s1", `{}`)
	reg.appendEvent("agent_registered", "a")
	waitEvents(t, c, id, 1)

	if _, err := hs.hub.Unsubscribe(context.Background(), "s2", 1, json.RawMessage(`{"subscriptionId":"`+id+`"}`)); rpcCode(err) != rpc.CodeInvalidParams {
		t.Errorf("other session's subscription: %v", err)
	}
	if _, err := hs.hub.Unsubscribe(context.Background(), "s1", 1, json.RawMessage(`{"subscriptionId":"nope"}`)); rpcCode(err) != rpc.CodeInvalidParams {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := hs.hub.Unsubscribe(context.Background(), "s1", 1, json.RawMessage(`{}`)); rpcCode(err) != rpc.CodeInvalidParams {
		t.Errorf("missing id: %v", err)
	}
	res, err := hs.hub.Unsubscribe(context.Background(), "s1", 1, json.RawMessage(`{"subscriptionId":"`+id+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	var got struct {
		Unsubscribed bool
		Subscription struct {
			ID       string
			ClosedAt int64
		}
	}
	if json.Unmarshal(b, &got) != nil || !got.Unsubscribed || got.Subscription.ID != id || got.Subscription.ClosedAt == 0 {
		t.Errorf("result %s", b)
	}
	if s, _ := reg.Session("s1"); len(s.Subscriptions) != 0 || hs.hub.HasSubscribers() {
		t.Error("subscription still registered")
	}
	reg.appendEvent("agent_registered", "b")
	hs.hub.step() // deliver anything pending, synchronously
	if n := len(c.events(t, id)); n != 1 {
		t.Errorf("got %d events after unsubscribe, want 1", n)
	}
}

func rpcCode(err error) int {
	var e *rpc.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func TestSubscribe_WaitsForLocalApply(t *testing.T) {
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	var waited []uint64
	var mu sync.Mutex
	hs := newHarness(t, reg, func(c *Config) {
		c.WaitApplied = func(_ context.Context, index uint64) error {
			mu.Lock()
			defer mu.Unlock()
			waited = append(waited, index)
			return nil
		}
	})
	id := hs.subscribe(t, "s1", `{}`)
	if _, err := hs.hub.Unsubscribe(context.Background(), "s1", 1, json.RawMessage(`{"subscriptionId":"`+id+`"}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waited) != 2 || waited[0] != 1 {
		t.Errorf("WaitApplied calls %v, want two (index 1)", waited)
	}
}
