package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// delivered decodes the n-th map/message notification a fake conn got.
func deliveredMessage(t *testing.T, c *fakeConn, n int) (raw json.RawMessage, msg struct {
	ID      string          `json:"id"`
	From    string          `json:"from"`
	To      json.RawMessage `json:"to"`
	Payload json.RawMessage `json:"payload"`
	Meta    json.RawMessage `json:"meta"`
}) {
	t.Helper()
	got := c.received()
	if len(got) <= n {
		t.Fatalf("conn received %d notifications, want > %d", len(got), n)
	}
	var env struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(got[n], &env); err != nil {
		t.Fatalf("notification is not JSON: %v: %s", err, got[n])
	}
	if err := json.Unmarshal(env.Message, &msg); err != nil {
		t.Fatalf("message is not JSON: %v", err)
	}
	return env.Message, msg
}

func TestSend_MessageShape(t *testing.T) {
	const ts = 1_700_000_000_000
	payload := `{"b": 1,   "a":[1.50, "x\u00e9", null],"z":{}}`
	cases := []struct {
		name     string
		from     Sender
		meta     string // "" = absent
		wantFrom string
		wantMeta string
	}{
		{"agent sender, no meta", agentSender("w1"), "", "w1", fmt.Sprintf(`{"timestamp":%d}`, ts)},
		{"client sender uses participant id", clientSender, "", "p-client", fmt.Sprintf(`{"timestamp":%d}`, ts)},
		{"meta passthrough with timestamp spliced", agentSender("w1"),
			`{"correlationId":"c-1", "priority":"high","_meta":{"z":1,"a":[2,1]},"isResult":true,"expectsResponse":false,"x-vendor":"é"}`,
			"w1", fmt.Sprintf(`{"timestamp":%d,"correlationId":"c-1", "priority":"high","_meta":{"z":1,"a":[2,1]},"isResult":true,"expectsResponse":false,"x-vendor":"é"}`, ts)},
		{"meta with timestamp unchanged", agentSender("w1"), `{"relationship":"peer","timestamp":42}`, "w1", `{"relationship":"peer","timestamp":42}`},
		{"empty meta", agentSender("w1"), `{ }`, "w1", fmt.Sprintf(`{"timestamp":%d}`, ts)},
		{"forged meta.from replaced by the server", agentSender("w1"), `{"from":"boss","priority":"low"}`, "w1",
			fmt.Sprintf(`{"from":"w1","timestamp":%d,"priority":"low"}`, ts)},
		{"forged meta.from with timestamp", clientSender, `{"timestamp":42,"from":{"x":1}}`, "p-client", `{"from":"p-client","timestamp":42}`},
		{"null meta", agentSender("w1"), `null`, "w1", fmt.Sprintf(`{"timestamp":%d}`, ts)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg, conns := world()
			r := testRouter(t, reg, conns, nil, nil)
			params := `{"to":{"agent":"w2"},"payload":` + payload
			if tc.meta != "" {
				params += `,"meta":` + tc.meta
			}
			res, err := r.Send(context.Background(), tc.from, json.RawMessage(params+"}"))
			if err != nil {
				t.Fatal(err)
			}
			raw, msg := deliveredMessage(t, conns["s-w2"], 0)
			if !json.Valid(raw) {
				t.Fatalf("message not valid JSON: %s", raw)
			}
			if msg.ID != res.(*SendResult).MessageID || len(msg.ID) != 26 {
				t.Errorf("message id %q, result messageId %q", msg.ID, res.(*SendResult).MessageID)
			}
			if msg.From != tc.wantFrom {
				t.Errorf("from = %q, want %q", msg.From, tc.wantFrom)
			}
			if string(msg.To) != `{"agent":"w2"}` {
				t.Errorf("to = %s", msg.To)
			}
			if string(msg.Payload) != payload {
				t.Errorf("payload changed:\n got %s\nwant %s", msg.Payload, payload)
			}
			if string(msg.Meta) != tc.wantMeta {
				t.Errorf("meta:\n got %s\nwant %s", msg.Meta, tc.wantMeta)
			}
		})
	}
}

func TestSend_NoPayload(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	if _, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(`{"to":"w2"}`)); err != nil {
		t.Fatal(err)
	}
	raw, msg := deliveredMessage(t, conns["s-w2"], 0)
	if msg.Payload != nil || bytes.Contains(raw, []byte(`"payload"`)) {
		t.Errorf("payload present: %s", raw)
	}
}

func TestSend_DeliveryFailures(t *testing.T) {
	reg, conns := world()
	conns["s-w2"].err = rpc.ErrSlowConsumer
	conns["s-solo"].err = rpc.ErrClosed
	delete(conns, "s-w3") // session not attached here any more
	relay := &fakePeers{}
	r := testRouter(t, reg, conns, nil, relay)

	res, err := r.Send(context.Background(), agentSender("w1"),
		json.RawMessage(`{"to":{"agents":["w2","solo","w3","far","mgr","orphan"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	sr := res.(*SendResult)
	if want := []string{"far", "mgr"}; !slices.Equal(sr.Delivered, want) {
		t.Errorf("delivered = %v, want %v", sr.Delivered, want)
	}
	wantFailed := []FailedRecipient{{"w2", reasonSlowConsumer}, {"solo", reasonNotConnected},
		{"w3", reasonNotConnected}, {"orphan", reasonOrphaned}}
	if !slices.Equal(sr.Failed, wantFailed) {
		t.Errorf("failed = %v, want %v", sr.Failed, wantFailed)
	}
	if len(relay.sent) != 1 || relay.sent[0].node != "n2" || relay.sent[0].env.RecipientAgentID != "far" ||
		relay.sent[0].env.RecipientSessionID != "s-far" {
		t.Fatalf("relay got %+v", relay.sent)
	}
	local, _ := deliveredMessage(t, conns["s-mgr"], 0)
	if !bytes.Equal(relay.sent[0].env.Message, local) {
		t.Errorf("relayed message differs from the local one:\n%s\n%s", relay.sent[0].env.Message, local)
	}

	// Every recipient failing is DELIVERY_FAILED with the failures listed.
	relay.err = errors.New("peer down")
	_, err = r.Send(context.Background(), agentSender("w1"), json.RawMessage(`{"to":{"agents":["far","w2"]}}`))
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeDeliveryFailed || !e.Data.Retryable {
		t.Fatalf("err = %v, want retryable 2003", err)
	}
	failed, _ := e.Data.Details["failed"].([]FailedRecipient)
	if want := []FailedRecipient{{"far", reasonRelayFailed}, {"w2", reasonSlowConsumer}}; !slices.Equal(failed, want) {
		t.Errorf("details.failed = %v, want %v", e.Data.Details["failed"], want)
	}
}

func TestSend_OrderPerRecipient(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	const n = 200
	for i := range n {
		p := fmt.Sprintf(`{"to":"w2","payload":%d}`, i)
		if _, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(p)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		_, msg := deliveredMessage(t, conns["s-w2"], i)
		if string(msg.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d has payload %s", i, msg.Payload)
		}
	}
}

func TestSend_InvalidParams(t *testing.T) {
	cases := []struct {
		name, params, field string
	}{
		{"empty", ``, "to"},
		{"null", `null`, "to"},
		{"not object", `[1]`, "params"},
		{"missing to", `{"payload":1}`, "to"},
		{"null to", `{"to":null}`, "to"},
		{"numeric to", `{"to":5}`, "to"},
		{"empty string to", `{"to":""}`, "to"},
		{"no form", `{"to":{}}`, "to"},
		{"unknown field", `{"to":{"agent":"w2","color":"red"}}`, "to.color"},
		{"agent not string", `{"to":{"agent":7}}`, "to.agent"},
		{"agent empty", `{"to":{"agent":""}}`, "to.agent"},
		{"agents empty", `{"to":{"agents":[]}}`, "to.agents"},
		{"agents not list", `{"to":{"agents":"w2"}}`, "to.agents"},
		{"agents empty id", `{"to":{"agents":["w2",""]}}`, "to.agents[1]"},
		{"parent false", `{"to":{"parent":false}}`, "to.parent"},
		{"broadcast string", `{"to":{"broadcast":"yes"}}`, "to.broadcast"},
		{"depth zero", `{"to":{"descendants":true,"depth":0}}`, "to.depth"},
		{"depth float", `{"to":{"descendants":true,"depth":1.5}}`, "to.depth"},
		{"depth without relative", `{"to":{"agent":"w2","depth":2}}`, "to.depth"},
		{"within without role", `{"to":{"scope":"team","within":"team"}}`, "to.within"},
		{"participants bad", `{"to":{"participants":"robots"}}`, "to.participants"},
		{"system false", `{"to":{"system":false}}`, "to.system"},
		{"system string alone", `{"to":{"system":"other"}}`, "to.system"},
		{"meta not object", `{"to":"w2","meta":"x"}`, "meta"},
		{"meta priority", `{"to":"w2","meta":{"priority":"asap"}}`, "meta.priority"},
		{"meta priority type", `{"to":"w2","meta":{"priority":1}}`, "meta.priority"},
		{"meta timestamp string", `{"to":"w2","meta":{"timestamp":"now"}}`, "meta.timestamp"},
		{"meta timestamp null", `{"to":"w2","meta":{"timestamp":null}}`, "meta.timestamp"},
		{"meta correlationId", `{"to":"w2","meta":{"correlationId":5}}`, "meta.correlationId"},
		{"meta isResult", `{"to":"w2","meta":{"isResult":"yes"}}`, "meta.isResult"},
		{"meta delivery", `{"to":"w2","meta":{"delivery":"maybe"}}`, "meta.delivery"},
		{"meta ttl", `{"to":"w2","meta":{"ttlMs":-1}}`, "meta.ttlMs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg, conns := world()
			r := testRouter(t, reg, conns, nil, nil)
			_, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(tc.params))
			var e *rpc.Error
			if !errors.As(err, &e) || e.Code != rpc.CodeInvalidParams {
				t.Fatalf("err = %v, want -32602", err)
			}
			if f := e.Data.Details["field"]; f != tc.field {
				t.Errorf("field = %v, want %q (%s)", f, tc.field, e.Message)
			}
		})
	}
}

func TestDeliverLocal(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	msg := json.RawMessage(`{"id":"01HZZZZZZZZZZZZZZZZZZZZZZZ","from":"far","to":"w2","payload":[1, 2]}`)

	if err := r.DeliverLocal(context.Background(), &Envelope{Message: msg, RecipientAgentID: "w2", RecipientSessionID: "stale"}); err != nil {
		t.Fatal(err)
	}
	raw, _ := deliveredMessage(t, conns["s-w2"], 0)
	if !bytes.Equal(raw, msg) {
		t.Errorf("delivered %s, want %s", raw, msg)
	}
	if err := r.DeliverLocal(context.Background(), &Envelope{Message: msg, RecipientSessionID: "s-client"}); err != nil {
		t.Fatal(err)
	}
	if len(conns["s-client"].received()) != 1 {
		t.Error("participant delivery missing")
	}
	if err := r.DeliverLocal(context.Background(), &Envelope{Message: msg, RecipientAgentID: "far"}); !errors.Is(err, ErrNotConnected) {
		t.Errorf("agent homed elsewhere: err = %v, want ErrNotConnected", err)
	}
	if err := r.DeliverLocal(context.Background(), &Envelope{RecipientAgentID: "w2"}); !errors.Is(err, ErrBadEnvelope) {
		t.Errorf("empty message: err = %v", err)
	}
	conns["s-w2"].err = rpc.ErrSlowConsumer
	if err := r.DeliverLocal(context.Background(), &Envelope{Message: msg, RecipientAgentID: "w2"}); !errors.Is(err, rpc.ErrSlowConsumer) {
		t.Errorf("slow consumer: err = %v", err)
	}
}

func TestNew_Validate(t *testing.T) {
	reg, _ := world()
	for _, cfg := range []Config{
		{Registry: reg, Sessions: noSessions{}},
		{NodeID: "n1", Sessions: noSessions{}},
		{NodeID: "n1", Registry: reg},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
