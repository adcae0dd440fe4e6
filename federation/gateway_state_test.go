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
