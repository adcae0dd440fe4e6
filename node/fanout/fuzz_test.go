package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// FuzzSubscribeParams: any JSON params either subscribe or fail with
// -32602 / 4000 (replay window); never a panic or another error.
func FuzzSubscribeParams(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `{"filter":{"eventTypes":["agent.*"],"agents":["a*"],"metadataMatch":{"x.y":1}}}`,
		`{"options":{"includeMessagePayloads":true,"excludeOwnEvents":false,"bufferSize":5}}`,
		`{"replayFrom":0}`, `{"replayFrom":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, `{"fromEventId":""}`,
		`{"filter":{"priorities":["urgent"],"environmentMatch":{"os.type":"linux"},"mail":{}}}`,
		`{"filter":[],"options":7}`, `{"fromTimestamp":1700000000000}`,
	} {
		f.Add(s)
	}
	reg := newFakeRegistry(10)
	reg.addSession("s1", "p1")
	for range 20 {
		reg.appendEvent("agent_registered", "a")
	}
	h, err := New(testConfig(reg, &fakeProposer{reg: reg}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, params string) {
		if !json.Valid([]byte(params)) {
			t.Skip() // the rpc layer only hands over valid JSON
		}
		res, err := h.Subscribe(context.Background(), "s1", 1, json.RawMessage(params))
		if err != nil {
			var e *rpc.Error
			if !errors.As(err, &e) || (e.Code != rpc.CodeInvalidParams && e.Code != rpc.CodeExhausted) {
				t.Fatalf("Subscribe(%s): unexpected error %v", params, err)
			}
			return
		}
		id := res.(SubscribeResult).SubscriptionID
		if _, err := h.Unsubscribe(context.Background(), "s1", 1, json.RawMessage(`{"subscriptionId":"`+id+`"}`)); err != nil {
			t.Fatalf("unsubscribe: %v", err)
		}
	})
}
