package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// FuzzSendParams: whatever valid JSON arrives as params, Send never panics,
// fails only with -32602 or a MAP routing-class code, and whatever it
// delivers is valid JSON.
func FuzzSendParams(f *testing.F) {
	for _, s := range []string{
		`{"to":"w2","payload":{"a":1},"meta":{"priority":"high"}}`,
		`{"to":{"agents":["w2","mgr"]},"meta":{"timestamp":5,"_meta":{"x":[1]}}}`,
		`{"to":{"role":"worker","within":"team"}}`,
		`{"to":{"descendants":true,"depth":2},"payload":null}`,
		`{"to":{"system":"s","agent":"a"}}`,
		`{"to":{"participants":"all"},"meta":{ }}`,
		`{"to":"scope:team","meta":{"correlationId":"x","isResult":true}}`,
		`{"to":{"agent":"w2","scope":"team"}}`,
		`{"to":[1],"meta":7}`,
		`"x"`,
	} {
		f.Add(s)
	}
	allowed := map[int]bool{
		rpc.CodeInvalidParams: true, rpc.CodeAddressNotFound: true, rpc.CodeAgentNotFound: true,
		rpc.CodeScopeNotFound: true, rpc.CodeDeliveryFailed: true, rpc.CodeAddressAmbiguous: true,
		rpc.CodePermissionDenied: true, rpc.CodeFederationSystemNotFound: true,
	}
	f.Fuzz(func(t *testing.T, params string) {
		if !json.Valid([]byte(params)) {
			t.Skip() // the rpc layer only hands over valid JSON
		}
		reg, conns := world()
		sink := &fakeSink{subs: true}
		r := testRouter(t, reg, conns, sink, nil)
		res, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(params))
		if err != nil {
			var e *rpc.Error
			if !errors.As(err, &e) || !allowed[e.Code] {
				t.Fatalf("unexpected error %v", err)
			}
			if e.Code == rpc.CodeInvalidParams && !strings.Contains(e.Message, ":") {
				t.Fatalf("-32602 without a field: %q", e.Message)
			}
		} else if _, ok := res.(*SendResult); !ok {
			t.Fatalf("result %T", res)
		}
		for id, c := range conns {
			for _, m := range c.received() {
				if !json.Valid(m) {
					t.Fatalf("conn %s got invalid JSON %s", id, m)
				}
			}
		}
		for _, ev := range sink.events {
			if !json.Valid(ev.Data) {
				t.Fatalf("%s event data invalid: %s", ev.Type, ev.Data)
			}
		}
	})
}

// FuzzPlainAgentForm: the {"agent":"id"} shortcut agrees with the general
// address decoder whenever it accepts.
func FuzzPlainAgentForm(f *testing.F) {
	for _, s := range []string{`{"agent":"w2"}`, `{"agent":""}`, `{"agent":"a\"b"}`, `{"agent":"é"}`, `{"agent":"x","depth":1}`, `{"agent":"x"} `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) || !strings.HasPrefix(raw, "{") {
			t.Skip() // the rpc layer only hands over valid JSON
		}
		id, ok := plainAgentForm([]byte(raw))
		if !ok {
			return
		}
		want, err := parseAddressObject(json.RawMessage(raw))
		if err != nil || want.kind != addrAgent || want.id != id {
			t.Fatalf("shortcut %q, general %+v %v", id, want, err)
		}
	})
}

// FuzzSendResultJSON: SendResult.AppendJSON writes exactly what
// encoding/json (HTML escaping off, as node/rpc encodes results) writes.
func FuzzSendResultJSON(f *testing.F) {
	f.Add("01J00000000000000000000000", "w2", "x", "slow_consumer", true)
	f.Add("id", "é<&>\u2028\x01\"\\", "", "", false)
	f.Fuzz(func(t *testing.T, id, delivered, failedID, reason string, withFailed bool) {
		for _, r := range []*SendResult{
			{MessageID: id, Delivered: []string{delivered, id}},
			{MessageID: id},
			{MessageID: id, Delivered: []string{}, Failed: []FailedRecipient{{ID: failedID, Reason: reason}, {ID: id, Reason: delivered}}},
		} {
			if !withFailed {
				r.Failed = nil
			}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(r); err != nil {
				t.Fatal(err)
			}
			got, err := r.AppendJSON(nil)
			if err != nil || string(got) != strings.TrimSuffix(want.String(), "\n") {
				t.Fatalf("AppendJSON = %s (%v), encoding/json = %s", got, err, want.String())
			}
		}
	})
}
