package fanout

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
)

// TestRouterEventsThroughHub wires a real Router to the Hub: a send to a
// recipient that cannot be reached yields message_sent then message_failed
// (caused by it), with the payload only for includeMessagePayloads.
func TestRouterEventsThroughHub(t *testing.T) {
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	reg.addAgent(registry.Agent{ID: "far", OwnerID: "p9", SessionID: "s9", HomeNode: "n2"})
	hs := newHarness(t, reg, nil)
	c := hs.conn("s1")
	plain := hs.subscribe(t, "s1", `{"filter":{"eventTypes":["message.*"]}}`)
	full := hs.subscribe(t, "s1", `{"filter":{"agents":["far"]},"options":{"includeMessagePayloads":true}}`)

	rcfg := router.DefaultConfig()
	rcfg.NodeID, rcfg.Registry, rcfg.Sessions, rcfg.Events = "n1", reg, sessionsNone{}, hs.hub
	r, err := router.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	from := router.Sender{SessionID: "s1", ParticipantID: "p1", ParticipantType: "client"}
	if _, err := r.Send(context.Background(), from, json.RawMessage(`{"to":{"agent":"far"},"payload":{"q":42}}`)); err == nil {
		t.Fatal("send to an unreachable agent succeeded")
	}
	for _, id := range []string{plain, full} {
		evs := waitEvents(t, c, id, 2)
		if evs[0].Event.Type != "message_sent" || evs[1].Event.Type != "message_failed" ||
			!slices.Equal(evs[1].CausedBy, []string{evs[0].EventID}) || evs[0].Event.Source != "p1" {
			t.Fatalf("events %+v", evs)
		}
		var d struct{ Payload json.RawMessage }
		_ = json.Unmarshal(evs[0].Event.Data, &d)
		if (id == full) != (string(d.Payload) == `{"q":42}`) {
			t.Errorf("subscription %s: payload %s", id, d.Payload)
		}
	}
}
