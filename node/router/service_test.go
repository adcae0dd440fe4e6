package router

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// fakeService records the sends handed to a registered service id.
type fakeService struct {
	mu    sync.Mutex
	calls []Sender
	err   error
}

func (f *fakeService) HandleSend(_ context.Context, from Sender, _ json.RawMessage) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, from)
	if f.err != nil {
		return nil, f.err
	}
	return map[string]any{"messageId": "svc-1", "delivered": []string{"svc.x"}}, nil
}

func (f *fakeService) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// TestSend_ServiceRecipient checks which address forms reach a registered
// service (the string id, "agent:<id>", {agent: id}) and that none of the
// others do, through both Send and HandleSend. "svc.x" is also a
// registered agent, which the service shadows.
func TestSend_ServiceRecipient(t *testing.T) {
	reg, conns := world()
	reg.agents = append(reg.agents, registry.Agent{ID: "svc.x", OwnerID: "p-svc", SessionID: "s-svc", HomeNode: "n1"})
	conns["s-svc"] = &fakeConn{}
	r := testRouter(t, reg, conns, nil, nil)
	svc := &fakeService{}
	if err := r.RegisterService("svc.x", svc); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		params    string
		toService bool
	}{
		{`{"to":"svc.x","payload":{"kind":"round"}}`, true},
		{`{"to":"agent:svc.x","payload":1}`, true},
		{`{"to":{"agent":"svc.x"},"payload":{},"meta":{"isResult":true,"correlationId":"r/r0/worker"}}`, true},
		{`{"to":{"agents":["svc.x"]}}`, false},
		{`{"to":{"agent":"w2"},"payload":"mentions svc.x"}`, false},
		{`{"to":"scope:team"}`, false},
	}
	for _, tc := range tests {
		for name, send := range map[string]func(context.Context, Sender, json.RawMessage) (any, error){"Send": r.Send, "HandleSend": r.HandleSend} {
			before := svc.count()
			res, err := send(context.Background(), agentSender("w1"), json.RawMessage(tc.params))
			if err != nil {
				t.Fatalf("%s %s: %v", name, tc.params, err)
			}
			_, routed := res.(*SendResult)
			if got := svc.count() == before+1; got != tc.toService || routed == tc.toService {
				t.Errorf("%s %s: service=%v routed=%v, want service=%v", name, tc.params, got, routed, tc.toService)
			}
		}
	}
	if got := svc.calls[0]; got != agentSender("w1") {
		t.Errorf("service saw sender %+v", got)
	}
}

// TestSend_ServiceAnswerIsTheSendAnswer checks that a service's error is
// the send's error unchanged, and that malformed params are refused by
// the router before any service sees them.
func TestSend_ServiceAnswerIsTheSendAnswer(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	want := rpc.NewError(90000, "Run not found")
	svc := &fakeService{err: want}
	if err := r.RegisterService("svc.x", svc); err != nil {
		t.Fatal(err)
	}
	if _, err := r.HandleSend(context.Background(), agentSender("w1"), json.RawMessage(`{"to":"svc.x"}`)); !errors.Is(err, want) {
		t.Fatalf("err = %v, want the service's", err)
	}
	for _, params := range []string{`{"to":"svc.x","meta":{"priority":"now"}}`, `{"payload":1}`, `[1]`} {
		var re *rpc.Error
		if _, err := r.HandleSend(context.Background(), agentSender("w1"), json.RawMessage(params)); !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
			t.Errorf("%s: err = %v, want -32602", params, err)
		}
	}
	if svc.count() != 1 {
		t.Fatalf("service calls = %d, want 1", svc.count())
	}
}

func TestRegisterService_Refusals(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	if err := r.RegisterService("svc.x", &fakeService{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id  string
		svc LocalService
	}{{"", &fakeService{}}, {"svc.y", nil}, {"svc.x", &fakeService{}}} {
		if err := r.RegisterService(tc.id, tc.svc); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("RegisterService(%q, %v) = %v, want ErrInvalidConfig", tc.id, tc.svc, err)
		}
	}
}

// TestDeliverService checks the entry federation uses for a send that
// crossed a link to a local service: the service sees the remote agent id
// and its system (which no local sender carries), its refusal comes back
// as a federation code, and an id that is no service is an unknown agent.
func TestDeliverService(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	svc := &fakeService{}
	if err := r.RegisterService("svc.x", svc); err != nil {
		t.Fatal(err)
	}
	if !r.IsService("svc.x") || r.IsService("w1") {
		t.Fatal("IsService does not tell services from agents")
	}
	params := json.RawMessage(`{"to":{"agent":"svc.x"},"payload":{},"meta":{"correlationId":"r/r1/dc2:agent:bob"}}`)
	if cerr := r.DeliverService(context.Background(), "svc.x", "dc2:agent:bob", params); cerr != nil {
		t.Fatal(cerr)
	}
	want := Sender{ParticipantID: "dc2:agent:bob", ParticipantType: "agent", AgentID: "dc2:agent:bob", SourceSystem: "dc2"}
	if got := svc.calls[0]; got != want {
		t.Fatalf("service saw %+v, want %+v", got, want)
	}
	svc.err = rpc.NewError(90002, "Task already settled").WithDetails(map[string]any{"reason": "already_settled"})
	for _, tc := range []struct {
		id, from string
		code     int
	}{
		{"svc.x", "dc2:agent:bob", 90002},
		{"svc.y", "dc2:agent:bob", rpc.CodeAgentNotFound},
		{"svc.x", "bob", rpc.CodeInvalidParams},
	} {
		cerr := r.DeliverService(context.Background(), tc.id, tc.from, params)
		if cerr == nil || cerr.Code != tc.code {
			t.Fatalf("DeliverService(%s, %s) = %v, want code %d", tc.id, tc.from, cerr, tc.code)
		}
	}
	svc.err = errors.New("boom")
	if cerr := r.DeliverService(context.Background(), "svc.x", "dc2:agent:bob", params); cerr == nil || cerr.Code != rpc.CodeDeliveryFailed {
		t.Fatalf("plain error: %v", cerr)
	}
}

// TestSend_ServiceInOwnSystemFederatedForm: "<own>:agent:<service>" and
// {system: own, agent: service} reach the local service (what a reply to
// a task's from gives in the run's home system); another system's id goes
// to federation.
func TestSend_ServiceInOwnSystemFederatedForm(t *testing.T) {
	reg, conns := world()
	r := testRouter(t, reg, conns, nil, nil)
	fed := &fakeFederation{out: federation.Outcome{Delivered: []string{"dc2:agent:svc.x"}}}
	r.fed = fed
	svc := &fakeService{}
	if err := r.RegisterService("svc.x", svc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		to        string
		toService bool
	}{
		{`"dc1:agent:svc.x"`, true},
		{`{"system":"dc1","agent":"svc.x"}`, true},
		{`"dc2:agent:svc.x"`, false},
		{`{"system":"dc2","agent":"svc.x"}`, false},
	} {
		before, sent := svc.count(), len(fed.sent)
		if _, err := r.Send(context.Background(), agentSender("w1"), json.RawMessage(`{"to":`+tc.to+`,"payload":{}}`)); err != nil {
			t.Fatalf("%s: %v", tc.to, err)
		}
		if got := svc.count() == before+1; got != tc.toService || (len(fed.sent) == sent+1) == tc.toService {
			t.Fatalf("%s: service=%v federation=%v, want service=%v", tc.to, got, len(fed.sent) > sent, tc.toService)
		}
	}
}
