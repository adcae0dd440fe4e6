package federation

import (
	"encoding/json"
	"strings"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func validEnv() *concordv1.FedEnvelope {
	return &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "dc2", HopCount: 1, MaxHops: 3,
		Path: []string{"dc1"}, MessageId: "m1", From: "alice", ToAgent: "bob", Payload: []byte(`{"x":1}`), Meta: []byte(`{"timestamp":1}`)}
}

func TestCheckInbound(t *testing.T) {
	tests := []struct {
		name string
		edit func(e *concordv1.FedEnvelope)
		from string
		code int
	}{
		{"valid", func(*concordv1.FedEnvelope) {}, "dc1", 0},
		{"loop", func(e *concordv1.FedEnvelope) { e.Path, e.HopCount = []string{"dc1", "dc2", "dc1"}, 3 }, "dc1", CodeLoopDetected},
		{"hops spent", func(e *concordv1.FedEnvelope) { e.Path, e.HopCount, e.MaxHops = []string{"dc1", "dc3"}, 2, 1 }, "dc3", CodeMaxHopsExceeded},
		{"no max hops", func(e *concordv1.FedEnvelope) { e.MaxHops = 0 }, "dc1", CodeMaxHopsExceeded},
		{"forged source", func(e *concordv1.FedEnvelope) { e.SourceSystem = "dc5" }, "dc1", CodeInvalidParams},
		{"path not from sender", func(*concordv1.FedEnvelope) {}, "dc4", CodeInvalidParams},
		{"hop count lies", func(e *concordv1.FedEnvelope) { e.HopCount = 0 }, "dc1", CodeInvalidParams},
		{"two recipients", func(e *concordv1.FedEnvelope) { e.ToScope = "s" }, "dc1", CodeInvalidParams},
		{"no recipient", func(e *concordv1.FedEnvelope) { e.ToAgent = "" }, "dc1", CodeInvalidParams},
		{"no sender", func(e *concordv1.FedEnvelope) { e.From = "" }, "dc1", CodeInvalidParams},
		{"huge", func(e *concordv1.FedEnvelope) { e.Payload = []byte(`"` + strings.Repeat("x", 2000) + `"`) }, "dc1", CodeInvalidParams},
		{"bad json", func(e *concordv1.FedEnvelope) { e.Payload = []byte(`{`) }, "dc1", CodeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := validEnv()
			tt.edit(e)
			err := CheckInbound(e, "dc2", tt.from, 1024)
			if (err == nil) != (tt.code == 0) || (err != nil && err.Code != tt.code) {
				t.Fatalf("got %v, want code %d", err, tt.code)
			}
		})
	}
}

func TestForwardAndStamp(t *testing.T) {
	e := validEnv()
	if err := CheckForward(e, "dc1"); err == nil || err.Code != CodeLoopDetected {
		t.Fatalf("forward back to the source: %v", err)
	}
	Stamp(e, "dc2")
	if e.GetHopCount() != 2 || e.GetPath()[1] != "dc2" {
		t.Fatalf("stamp: %v", e)
	}
	Stamp(e, "dc3")
	if err := CheckForward(e, "dc4"); err == nil || err.Code != CodeMaxHopsExceeded {
		t.Fatalf("fourth hop of 3: %v", err)
	}
}

func TestBuildMessage(t *testing.T) {
	var m struct {
		ID, From   string
		To         map[string]string
		Payload    map[string]int
		Meta       map[string]int
		Federation struct {
			SourceSystem string
			Path         []string
		}
	}
	if err := json.Unmarshal(BuildMessage(validEnv()), &m); err != nil {
		t.Fatal(err)
	}
	if m.From != "dc1:agent:alice" || m.To["agent"] != "bob" || m.Payload["x"] != 1 || m.Federation.SourceSystem != "dc1" {
		t.Fatalf("message %+v", m)
	}
}

func TestPolicy(t *testing.T) {
	a := AgentView{ID: "rev-1", Name: "Reviewer", Role: "coder", Tags: []string{"public"}}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"all", true}, {"none", false}, {"role:coder", true}, {"role:ops", false},
		{"name:rev-*", true}, {"name:Rev*", true}, {"name:x*", false}, {"tag:public", true}, {"tag:x", false},
	} {
		p, err := ParsePolicy(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got := Matches(p, a); got != tc.want {
			t.Fatalf("%s: %v", tc.in, got)
		}
		if FormatPolicy(p) != tc.in {
			t.Fatalf("format %s: %s", tc.in, FormatPolicy(p))
		}
	}
	for _, bad := range []string{"", "role", "all:x", "name:[", "tags:x"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if Matches(nil, a) {
		t.Fatal("an unset policy exported something")
	}
}

func TestToken_RoundTrip(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	in := &concordv1.FedToken{SystemId: "dc2", PeerSystemId: "dc1", Addrs: []string{"127.0.0.1:7701"}, Secret: secret, ExpiresAtMs: 5, CaPem: []byte("pem")}
	s, err := EncodeToken(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeToken(" " + s + "\n")
	if err != nil || out.GetSystemId() != "dc2" || string(out.GetSecret()) != string(secret) {
		t.Fatalf("round trip: %v %v", out, err)
	}
	for _, bad := range []string{"", "x", tokenPrefix + "!!", tokenPrefix, s[:len(s)-4], tokenPrefix + strings.Repeat("A", maxTokenLen)} {
		if _, err := DecodeToken(bad); err == nil {
			t.Fatalf("%.40q accepted", bad)
		}
	}
}

func TestAppendJSONString_MatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "dc1", "alice-1_x.y:z", `q"uote`, `back\slash`, "new\nline", "<tag>&", "é", "\x7f", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestBuildMessage_SizedOnce(t *testing.T) {
	env := validEnv()
	env.Payload = []byte(`"` + strings.Repeat("x", 254) + `"`)
	env.Meta = []byte(`{"correlationId":"c-1","expectsResponse":true}`)
	if m := BuildMessage(env); cap(m) < len(m) || len(m) > cap(m) || cap(m)-len(m) > 256 {
		t.Fatalf("BuildMessage: len %d cap %d: sized badly", len(m), cap(m))
	}
	if allocs := testing.AllocsPerRun(50, func() { _ = BuildMessage(env) }); allocs > 1 {
		t.Fatalf("BuildMessage allocates %v times per message, want 1", allocs)
	}
}

func TestBuildMessage_EscapesUnusualIDs(t *testing.T) {
	env := validEnv()
	env.From, env.SourceSystem = `al"ice\`, "dc1"
	var m struct{ From string }
	if err := json.Unmarshal(BuildMessage(env), &m); err != nil || m.From != RemoteID("dc1", `al"ice\`) {
		t.Fatalf("from %q, %v", m.From, err)
	}
}
