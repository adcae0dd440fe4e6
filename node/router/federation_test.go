package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/rpc"
)

// fakeFederation records the messages handed to it and answers with out.
type fakeFederation struct {
	sent []federation.Message
	out  federation.Outcome
}

func (f *fakeFederation) SystemID() string { return "dc1" }

func (f *fakeFederation) Send(m federation.Message, done func(federation.Outcome)) {
	f.sent = append(f.sent, m)
	done(f.out)
}

func TestSend_FederatedForms(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	fed := &fakeFederation{out: federation.Outcome{Delivered: []string{"dc2:agent:bob"}}}
	r.fed = fed
	from := Sender{SessionID: "s-w1", ParticipantID: "p-w1", AgentID: "w1"}
	tests := []struct {
		to           string
		agent, scope string
	}{
		{`"dc2:agent:bob"`, "bob", ""},
		{`{"system":"dc2","agent":"bob"}`, "bob", ""},
		{`{"agent":"dc2:agent:bob"}`, "bob", ""}, // AgentConnection.reply() to a remote sender
		{`"dc2:scope:team"`, "", "team"},
		{`{"system":"dc2","scope":"team"}`, "", "team"},
	}
	for _, tt := range tests {
		res, err := r.Send(context.Background(), from, json.RawMessage(`{"to":`+tt.to+`,"payload":{"x":1},"meta":{"correlationId":"c1"}}`))
		if err != nil {
			t.Fatalf("%s: %v", tt.to, err)
		}
		m := fed.sent[len(fed.sent)-1]
		if m.TargetSystem != "dc2" || m.ToAgent != tt.agent || m.ToScope != tt.scope || m.From != "w1" ||
			string(m.Payload) != `{"x":1}` || !json.Valid(m.Meta) {
			t.Fatalf("%s: handed %+v", tt.to, m)
		}
		if sr := res.(*SendResult); !slices.Equal(sr.Delivered, []string{"dc2:agent:bob"}) || sr.MessageID != m.MessageID {
			t.Fatalf("%s: result %+v", tt.to, sr)
		}
	}
	// This system's own id is a local address and never reaches federation.
	n := len(fed.sent)
	if res, err := r.Send(context.Background(), from, json.RawMessage(`{"to":"dc1:agent:w2"}`)); err != nil ||
		!slices.Equal(res.(*SendResult).Delivered, []string{"w2"}) || len(fed.sent) != n {
		t.Fatalf("own system: %v %v", res, err)
	}
	// Queued and refused outcomes.
	fed.out = federation.Outcome{Queued: true}
	res, err := r.Send(context.Background(), from, json.RawMessage(`{"to":"dc2:agent:bob"}`))
	if err != nil || !slices.Equal(res.(*SendResult).Queued, []string{"dc2:agent:bob"}) || len(res.(*SendResult).Delivered) != 0 {
		t.Fatalf("queued: %v %v", res, err)
	}
	b, _ := res.(*SendResult).AppendJSON(nil)
	if !json.Valid(b) || !strings.Contains(string(b), `"queued":["dc2:agent:bob"]`) {
		t.Fatalf("result JSON %s", b)
	}
	fed.out = federation.Outcome{Err: &federation.CodeError{Code: rpc.CodeLoopDetected, Message: "loop"}}
	_, err = r.Send(context.Background(), from, json.RawMessage(`{"to":"dc2:agent:bob"}`))
	if !rpc.IsCode(err, rpc.CodeLoopDetected) {
		t.Fatalf("refusal: %v", err)
	}
	for _, bad := range []string{`{"system":"dc2","agent":"bob","within":"x"}`, `{"system":"dc2","agent":""}`, `{"system":"dc2","scope":7}`} {
		if _, err := r.Send(context.Background(), from, json.RawMessage(`{"to":`+bad+`}`)); !rpc.IsCode(err, rpc.CodeInvalidParams) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}

func TestSend_FederatedWithoutFederation(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	_, err := r.Send(context.Background(), Sender{SessionID: "s-w1", AgentID: "w1"}, json.RawMessage(`{"to":"dc2:agent:bob"}`))
	if !rpc.IsCode(err, rpc.CodeFederationSystemNotFound) {
		t.Fatalf("got %v, want 5001", err)
	}
}

func TestDeliverAgent(t *testing.T) {
	reg, conns := world()
	peers := &fakePeers{}
	r := testRouter(t, reg, conns, nil, peers)
	msg := json.RawMessage(`{"id":"m","from":"dc2:agent:bob","to":{"agent":"w1"}}`)
	var got []error
	done := func(err error) { got = append(got, err) }
	r.DeliverAgent(context.Background(), "w1", msg, done)
	r.DeliverAgent(context.Background(), "nobody", msg, done)
	r.DeliverAgent(context.Background(), "orphan", msg, done)
	var ce *federation.CodeError
	if got[0] != nil || !errors.As(got[1], &ce) || ce.Code != rpc.CodeAgentNotFound ||
		!errors.As(got[2], &ce) || ce.Code != rpc.CodeDeliveryFailed {
		t.Fatalf("outcomes %v", got)
	}
	if n := len(conns["s-w1"].received()); n != 1 {
		t.Fatalf("w1 got %d notifications", n)
	}
}

// TestDeliverAgent_RelayFailure: a message for an agent on another node
// of this system whose relay there fails answers 5000 (the sending system
// may try again: a guaranteed message is resent, not dropped); one the
// agent's node could not hand to its connection answers 2003.
func TestDeliverAgent_RelayFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
	}{
		{"relay failed", errors.New("relay connection lost"), rpc.CodeFederationUnavailable},
		{"not connected there", fmt.Errorf("deliver on n2: %w", ErrNotConnected), rpc.CodeDeliveryFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, conns := world()
			r := testRouter(t, reg, conns, nil, &fakePeers{err: tc.err})
			var got error
			r.DeliverAgent(context.Background(), "far", json.RawMessage(`{"id":"m","from":"dc2:agent:bob","to":{"agent":"far"}}`),
				func(err error) { got = err })
			var ce *federation.CodeError
			if !errors.As(got, &ce) || ce.Code != tc.code {
				t.Fatalf("outcome %v, want code %d", got, tc.code)
			}
		})
	}
}

// TestDeliverSession: a message for a participant session (the SDK
// gateway serving another system) reaches its connection here, is relayed
// to its home node, or fails for a closed or detached session.
func TestDeliverSession(t *testing.T) {
	reg, conns := world()
	peers := &fakePeers{}
	r := testRouter(t, reg, conns, nil, peers)
	msg := json.RawMessage(`{"id":"m","from":"dc1:agent:w1","to":{"system":"lab","agent":"alice"}}`)
	var got []error
	done := func(err error) { got = append(got, err) }
	r.DeliverSession(context.Background(), "s-client", msg, done)
	r.DeliverSession(context.Background(), "s-far", msg, done)
	r.DeliverSession(context.Background(), "s-gone", msg, done)
	r.DeliverSession(context.Background(), "s-nobody", msg, done)
	var ce *federation.CodeError
	if got[0] != nil || got[1] != nil || !errors.As(got[2], &ce) || ce.Code != rpc.CodeDeliveryFailed ||
		!errors.As(got[3], &ce) || ce.Code != rpc.CodeDeliveryFailed {
		t.Fatalf("outcomes %v", got)
	}
	if n := len(conns["s-client"].received()); n != 1 {
		t.Fatalf("the local session got %d notifications", n)
	}
	if len(peers.sent) != 1 || peers.sent[0].node != "n2" || peers.sent[0].env.RecipientSessionID != "s-far" || peers.sent[0].env.RecipientAgentID != "" {
		t.Fatalf("relayed %+v", peers.sent)
	}
}
