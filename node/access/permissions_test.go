package access

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/concordmap/concord/node/registry"
)

func TestParsePermissions(t *testing.T) {
	good := []string{
		``, `null`, `{}`,
		`{"canSee":{"agents":"hierarchy","scopes":"member","structure":"local"}}`,
		`{"canMessage":{"agents":{"include":["a","b"]},"scopes":"all"},"acceptsFrom":{"agents":"scoped","clients":"none","systems":{"include":["sys"]}}}`,
	}
	for _, g := range good {
		if _, err := ParsePermissions(json.RawMessage(g)); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
	bad := map[string]string{
		`[]`:                                        "",
		`{"canSee":{"agents":"everyone"}}`:          "canSee.agents",
		`{"canSee":{"agents":"member"}}`:            "canSee.agents",
		`{"canSee":{"structure":"deep"}}`:           "canSee.structure",
		`{"canMessage":{"agents":"direct"}}`:        "canMessage.agents",
		`{"acceptsFrom":{"clients":"hierarchy"}}`:   "acceptsFrom.clients",
		`{"acceptsFrom":{"agents":{"only":["a"]}}}`: "acceptsFrom.agents",
		`{"canSee":{"agent":"all"}}`:                "canSee.agent",
		`{"canFly":{}}`:                             "canFly",
	}
	for in, field := range bad {
		_, err := ParsePermissions(json.RawMessage(in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: err %v, want field %q", in, err, field)
		}
	}
}

func TestAgentPermissionLayer(t *testing.T) {
	perm := func(s string) json.RawMessage { return json.RawMessage(s) }
	r := fakeReader{
		agents: map[string]registry.Agent{
			// root -> mid -> leaf; "peer" shares scope "s" with leaf; "far" is unrelated.
			"root": {ID: "root", OwnerID: "p-root"},
			"mid":  {ID: "mid", OwnerID: "p-mid", Parent: "root"},
			"leaf": {ID: "leaf", OwnerID: "p-leaf", Parent: "mid", Scopes: []string{"s"},
				PermissionOverrides: perm(`{"canSee":{"agents":"hierarchy","scopes":"member","structure":"none"},"canMessage":{"agents":"scoped","scopes":"member"}}`)},
			"peer": {ID: "peer", OwnerID: "p-peer", Scopes: []string{"s"},
				PermissionOverrides: perm(`{"acceptsFrom":{"agents":{"include":["root"]},"clients":{"include":["ops"]},"systems":"none"}}`)},
			"far": {ID: "far", OwnerID: "p-far", PermissionOverrides: perm(`{"canSee":{"agents":{"include":["root"]}}}`)},
			"two": {ID: "two", OwnerID: "p-two"}, // p-two also owns "far" in some cases below
		},
		scopes: map[string]registry.Scope{
			"s":     {ID: "s", OwnerID: "p-peer", Members: []string{"leaf", "peer"}},
			"other": {ID: "other", OwnerID: "p-root"},
		},
	}
	view := func(pid string, agents ...string) Viewer {
		return Viewer{ParticipantID: pid, ParticipantType: "agent", Agents: agents}
	}
	seeCases := []struct {
		name   string
		v      Viewer
		target string
		want   bool
	}{
		{"hierarchy: ancestor", view("p-leaf", "leaf"), "root", true},
		{"hierarchy: parent", view("p-leaf", "leaf"), "mid", true},
		{"hierarchy: unrelated", view("p-leaf", "leaf"), "far", false},
		{"hierarchy: scope peer is not kin", view("p-leaf", "leaf"), "peer", false},
		{"include list", view("p-far", "far"), "root", true},
		{"include list: others hidden", view("p-far", "far"), "mid", false},
		{"own agent always", view("p-far", "far"), "far", true},
		{"no agents: no layer", view("p-x"), "far", true},
		{"most restrictive of several agents", view("p-two", "two", "far"), "mid", false},
		{"system sees all", Viewer{ParticipantID: "sys", ParticipantType: "system", Agents: []string{"leaf"}}, "far", true},
	}
	for _, tc := range seeCases {
		a := r.agents[tc.target]
		if got := AgentVisible(r, tc.v, &a); got != tc.want {
			t.Errorf("see %s: got %v want %v", tc.name, got, tc.want)
		}
	}
	s, other := r.scopes["s"], r.scopes["other"]
	if !ScopeVisible(r, view("p-leaf", "leaf"), &s) || ScopeVisible(r, view("p-leaf", "leaf"), &other) {
		t.Error("canSee.scopes member not applied")
	}
	if got := StructureOf(r, view("p-leaf", "leaf")); got != "none" {
		t.Errorf("structure %q", got)
	}
	ev := registry.Event{Type: "agent_state_changed", AgentIDs: []string{"far"}}
	if EventVisible(r, view("p-leaf", "leaf"), &ev) {
		t.Error("an event about an agent hidden by canSee was visible")
	}

	send := func(ptype, pid string, agents ...string) Sender {
		return Sender{ParticipantID: pid, ParticipantType: ptype, Agents: agents, SystemID: "sys"}
	}
	msgCases := []struct {
		name string
		s    Sender
		to   string
		want bool
	}{
		{"scope peer: canMessage allows, its acceptsFrom refuses", send("agent", "p-leaf", "leaf"), "peer", false},
		{"canMessage scoped: kin outside the scope", send("agent", "p-leaf", "leaf"), "mid", false},
		{"acceptsFrom include: root accepted", send("agent", "p-root", "root"), "peer", true},
		{"acceptsFrom include: mid refused", send("agent", "p-mid", "mid"), "peer", false},
		{"acceptsFrom clients include", send("client", "ops"), "peer", true},
		{"acceptsFrom clients: others refused", send("client", "eve"), "peer", false},
		{"acceptsFrom systems none", send("system", "root-op"), "peer", false},
		{"agent participant without agents", send("agent", "p-x"), "peer", false},
		{"unrestricted", send("agent", "p-root", "root"), "mid", true},
	}
	for _, tc := range msgCases {
		a := r.agents[tc.to]
		if got := MayMessage(r, tc.s, &a); got != tc.want {
			t.Errorf("message %s: got %v want %v", tc.name, got, tc.want)
		}
	}
	if !MaySendToScope(r, send("agent", "p-leaf", "leaf"), &s) || MaySendToScope(r, send("agent", "p-leaf", "leaf"), &other) {
		t.Error("canMessage.scopes member not applied")
	}
}

func BenchmarkPermissionsOf(b *testing.B) {
	a := registry.Agent{ID: "a", PermissionOverrides: json.RawMessage(`{"canSee":{"agents":"hierarchy"}}`)}
	for b.Loop() {
		_ = PermissionsOf(&a)
	}
}

func TestEventVisible_ClientPermissions(t *testing.T) {
	ev := registry.Event{Type: "permissions_client_updated", Data: json.RawMessage(`{"clientId":"bob","denied":["messaging.canSend"]}`)}
	r := fakeReader{}
	for _, tc := range []struct {
		v    Viewer
		want bool
	}{
		{Viewer{ParticipantID: "bob", ParticipantType: "client"}, true},
		{Viewer{ParticipantID: "eve", ParticipantType: "agent"}, false},
		{Viewer{ParticipantID: "ops", ParticipantType: "system"}, true},
	} {
		if got := EventVisible(r, tc.v, &ev); got != tc.want {
			t.Errorf("%s sees %s: %v, want %v", tc.v.ParticipantID, ev.Type, got, tc.want)
		}
	}
}

func FuzzParsePermissions(f *testing.F) {
	f.Add([]byte(`{"canSee":{"agents":"hierarchy","scopes":{"include":["s"]},"structure":"local"}}`))
	f.Add([]byte(`{"acceptsFrom":{"clients":{"include":[]}}}`))
	f.Add([]byte(`{"canMessage":{"agents":{"include":["a"],"x":1}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePermissions(b)
		if err != nil {
			return
		}
		for _, r := range []Rule{p.SeeAgents, p.SeeScopes, p.MessageAgents, p.MessageScopes, p.AcceptAgents, p.AcceptClients, p.AcceptSystems} {
			if r.Kind == RuleInclude && len(r.Include) > maxIncludes {
				t.Fatalf("accepted an include list of %d", len(r.Include))
			}
		}
		// Whatever parsed must decide without panicking.
		a := registry.Agent{ID: "a", PermissionOverrides: b}
		PermissionsOf(&a)
	})
}

func TestAcceptsFromSystem(t *testing.T) {
	a := registry.Agent{ID: "a", PermissionOverrides: json.RawMessage(`{"acceptsFrom":{"systems":{"include":["dc2"]}}}`)}
	none := registry.Agent{ID: "n", PermissionOverrides: json.RawMessage(`{"acceptsFrom":{"systems":"none"}}`)}
	free := registry.Agent{ID: "f"}
	if !AcceptsFromSystem(fakeReader{}, &a, "dc2") || AcceptsFromSystem(fakeReader{}, &a, "dc3") || AcceptsFromSystem(fakeReader{}, &a, "") ||
		AcceptsFromSystem(fakeReader{}, &none, "dc2") || !AcceptsFromSystem(fakeReader{}, &free, "dc3") {
		t.Fatal("acceptsFrom.systems misapplied")
	}
}
