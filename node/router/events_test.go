package router

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
)

func TestSend_Events(t *testing.T) {
	reg, conns := world()
	conns["s-w2"].err = errSlow()
	sink := &fakeSink{subs: true}
	r := testRouter(t, reg, conns, sink, nil)
	params := `{"to":{"scope":"team"},"payload":{"q": "hi"},"meta":{"correlationId":"c-9","priority":"urgent"}}`
	res, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*SendResult).MessageID
	if len(sink.events) != 3 {
		t.Fatalf("got %d events, want sent, delivered, failed", len(sink.events))
	}
	sent, dlv, fail := sink.events[0], sink.events[1], sink.events[2]
	if sent.Type != EventMessageSent || dlv.Type != EventMessageDelivered || fail.Type != EventMessageFailed {
		t.Fatalf("types %s %s %s", sent.Type, dlv.Type, fail.Type)
	}
	for _, ev := range sink.events {
		if !json.Valid(ev.Data) {
			t.Fatalf("%s data invalid: %s", ev.Type, ev.Data)
		}
		if ev.Source != "w1" || ev.Timestamp != 1_700_000_000_000 || len(ev.ID) != 26 {
			t.Errorf("%s: source %q ts %d id %q", ev.Type, ev.Source, ev.Timestamp, ev.ID)
		}
		if !slices.Equal(ev.ScopeIDs, []string{"team"}) {
			t.Errorf("%s scopes %v", ev.Type, ev.ScopeIDs)
		}
	}
	if len(sent.CausedBy) != 0 || !slices.Equal(dlv.CausedBy, []string{sent.ID}) || !slices.Equal(fail.CausedBy, []string{sent.ID}) {
		t.Errorf("causedBy: sent %v delivered %v failed %v", sent.CausedBy, dlv.CausedBy, fail.CausedBy)
	}
	want := map[string]string{
		EventMessageSent: `{"messageId":"` + id + `","from":"w1","timestamp":1700000000000,"to":{"scope":"team"},` +
			`"correlationId":"c-9","priority":"urgent","payload":{"q": "hi"}}`,
		EventMessageDelivered: `{"messageId":"` + id + `","from":"w1","timestamp":1700000000000,"deliveredTo":["mgr"],` +
			`"correlationId":"c-9","payload":{"q": "hi"}}`,
		EventMessageFailed: `{"messageId":"` + id + `","from":"w1","timestamp":1700000000000,"to":"w2","reason":"slow_consumer","code":2003}`,
	}
	for _, ev := range sink.events {
		if string(ev.Data) != want[ev.Type] {
			t.Errorf("%s data\n got %s\nwant %s", ev.Type, ev.Data, want[ev.Type])
		}
	}
	if !slices.Equal(sent.AgentIDs, []string{"w1", "mgr", "w2"}) || !slices.Equal(dlv.AgentIDs, []string{"w1", "mgr"}) ||
		!slices.Equal(fail.AgentIDs, []string{"w1", "w2"}) {
		t.Errorf("agent ids: %v %v %v", sent.AgentIDs, dlv.AgentIDs, fail.AgentIDs)
	}
}

func TestSend_NoEventsWithoutSubscribers(t *testing.T) {
	reg, conns := world()
	sink := &fakeSink{subs: false}
	r := testRouter(t, reg, conns, sink, nil)
	if _, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(`{"to":"w2"}`)); err != nil {
		t.Fatal(err)
	}
	if len(sink.events) != 0 {
		t.Errorf("published %d events with no subscriber", len(sink.events))
	}
}
