package federation

import (
	"errors"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

const cmdBind = concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_BIND

func bind(system, session string) *concordv1.FedGatewayBind {
	return &concordv1.FedGatewayBind{Binding: &concordv1.FedGatewayBinding{SystemId: system, SessionId: session, ParticipantId: "gw", BoundAtMs: 1}}
}

func TestState_GatewayBind(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc2")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  *concordv1.FedGatewayBind
		ok   bool
	}{
		{"bind", bind("lab", "S1"), true},
		{"rebind to a newer session", bind("lab", "S2"), true},
		{"no session", bind("lab", ""), false},
		{"bad system id", bind("a:b", "S3"), false},
		{"a linked system", bind("dc2", "S3"), false},
		{"empty body", &concordv1.FedGatewayBind{}, false},
	} {
		err := apply(t, s, cmdBind, tc.cmd)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalidCommand) {
			t.Fatalf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if b, ok := s.Gateway("lab"); !ok || b.GetSessionId() != "S2" {
		t.Fatalf("binding %v %v, want S2", b, ok)
	}
	if _, ok := s.Gateway("dc2"); ok {
		t.Fatal("a linked system got a gateway binding")
	}

}

func TestState_GatewayUnbind(t *testing.T) {
	cmdUnbind := concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_UNBIND
	s := NewState()
	for _, b := range []*concordv1.FedGatewayBind{bind("lab", "S1"), bind("lab2", "S1")} {
		if err := apply(t, s, cmdBind, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		cmd     *concordv1.FedGatewayUnbind
		ok      bool
		lab     string // the session bound to lab after it ("" none)
		gateway int    // bindings left
	}{
		{"bad system id", &concordv1.FedGatewayUnbind{SystemId: "a:b", SessionId: "S1"}, false, "S1", 2},
		{"no session", &concordv1.FedGatewayUnbind{SystemId: "lab"}, false, "S1", 2},
		{"another session's ending keeps the binding", &concordv1.FedGatewayUnbind{SystemId: "lab", SessionId: "S9"}, true, "S1", 2},
		{"an unbound system", &concordv1.FedGatewayUnbind{SystemId: "nobody", SessionId: "S1"}, true, "S1", 2},
		{"its session ended", &concordv1.FedGatewayUnbind{SystemId: "lab", SessionId: "S1"}, true, "", 1},
		{"twice", &concordv1.FedGatewayUnbind{SystemId: "lab", SessionId: "S1"}, true, "", 1},
	} {
		err := apply(t, s, cmdUnbind, tc.cmd)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalidCommand) {
			t.Fatalf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
		b, ok := s.Gateway("lab")
		if ok != (tc.lab != "") || b.GetSessionId() != tc.lab || len(s.Gateways()) != tc.gateway {
			t.Fatalf("%s: lab bound to %v (%v), %d bindings; want %q, %d", tc.name, b, ok, len(s.Gateways()), tc.lab, tc.gateway)
		}
	}
}
