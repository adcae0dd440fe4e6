package clustertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestEvents_SameIDsOnEveryNode: subscribers on nodes 2 and 3 receive the
// state events of an agent connected to node 1 (registered, then three
// state changes) in the same order with the same event ids.
func TestEvents_SameIDsOnEveryNode(t *testing.T) {
	c := New(t, 3)
	sub := map[string]any{"filter": map[string]any{
		"agents":     []string{"ev"},
		"eventTypes": []string{"agent_registered", "agent_state_changed"},
	}}
	subscribers := []*Client{
		c.Connect(t, 1, map[string]any{"participantType": "system"}),
		c.Connect(t, 2, map[string]any{"participantType": "system"}),
	}
	subIDs := make([]string, len(subscribers))
	for k, s := range subscribers {
		subIDs[k] = subscribeRetry(t, s, sub)
	}
	ev := agentOn(t, c, 0, "ev", nil)
	for _, state := range []string{"busy", "idle", "busy"} {
		// A retry after an unknown outcome may add a state change event;
		// what matters is that every node shows the same ones.
		writeRetry(t, ev, "map/agents/update", map[string]any{"agentId": "ev", "state": state})
	}
	const want = 4 // registered + at least 3 state changes
	var lists [][]string
	for k, s := range subscribers {
		evs, err := s.WaitEvents(subIDs[k], DeliveryTimeout, func(evs []EventNote) error {
			if len(evs) < want {
				return fmt.Errorf("%d of %d events", len(evs), want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("subscriber on %s: %v", c.Node(k+1), err)
		}
		var ids, types []string
		for _, e := range evs {
			ids = append(ids, e.EventID)
			types = append(types, e.Event.Type)
			if e.EventID == "" || e.EventID != e.Event.ID {
				t.Errorf("event %+v: eventId and event.id must be set and equal", e)
			}
		}
		if types[0] != "agent_registered" || slices.ContainsFunc(types[1:], func(s string) bool { return s != "agent_state_changed" }) {
			t.Errorf("subscriber on %s got types %v", c.Node(k+1), types)
		}
		lists = append(lists, ids)
	}
	if !slices.Equal(lists[0], lists[1]) {
		t.Errorf("event ids differ between nodes:\n%s: %v\n%s: %v", c.Node(1), lists[0], c.Node(2), lists[1])
	}
	c.RequireInvariants(t)
}

// TestEvents_MessageEventsClusterWide: subscribers on nodes 2 and 3 see
// message_sent and message_delivered for a message from an agent on node 1
// to an agent on node 2 — ephemeral events, relayed to the nodes that hold
// subscriptions rather than read from the replicated log. The subscribers
// are system participants: message events reach only the parties and
// system participants (map-protocol.md §7).
func TestEvents_MessageEventsClusterWide(t *testing.T) {
	c := New(t, 3)
	sub := map[string]any{"filter": map[string]any{"eventTypes": []string{"message_sent", "message_delivered"}}}
	subscribers := []*Client{
		c.Connect(t, 1, map[string]any{"participantType": "system"}),
		c.Connect(t, 2, map[string]any{"participantType": "system"}),
	}
	subIDs := make([]string, len(subscribers))
	for k, s := range subscribers {
		subIDs[k] = subscribeRetry(t, s, sub)
	}
	src := agentOn(t, c, 0, "src", nil)
	agentOn(t, c, 1, "dst", nil)
	c.RequireConverged(t) // node 1 has applied both subscriptions
	res, err := src.Send(map[string]any{"to": map[string]any{"agent": "dst"}, "payload": map[string]any{"n": 1}})
	if err != nil || !slices.Equal(res.Delivered, []string{"dst"}) {
		t.Fatalf("send: %+v %v", res, err)
	}
	for k, s := range subscribers {
		_, err := s.WaitEvents(subIDs[k], DeliveryTimeout, func(evs []EventNote) error {
			var seen []string
			for _, e := range evs {
				var d struct{ MessageID string }
				_ = json.Unmarshal(e.Event.Data, &d)
				if d.MessageID == res.MessageID {
					seen = append(seen, e.Event.Type)
				}
			}
			if !slices.Equal(seen, []string{"message_sent", "message_delivered"}) {
				return fmt.Errorf("events for message %s: %v", res.MessageID, seen)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("subscriber on %s: %v", c.Node(k+1), err)
		}
	}
}
