package access

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/registry"
)

func TestParseClientVisibility(t *testing.T) {
	good := []string{``, `null`, `{}`,
		`{"agents":"none","scopes":"all","events":{"include":["agent_registered"]},"structure":false}`,
		`{"agents":{"roles":["worker"]},"scopes":{"include":["s"]}}`}
	for _, g := range good {
		c, err := ParseClientVisibility(json.RawMessage(g))
		if err != nil {
			t.Errorf("%s: %v", g, err)
			continue
		}
		// The canonical form reads back to the same value.
		b, _ := json.Marshal(c)
		if back, err := ParseClientVisibility(b); err != nil || back.Unrestricted() != c.Unrestricted() || back.HideStructure != c.HideStructure ||
			back.Agents.Kind != c.Agents.Kind && c.Agents.Kind != "" {
			t.Errorf("%s: canonical %s reads back as %+v (%v)", g, b, back, err)
		}
	}
	bad := map[string]string{
		`[]`:                                   "",
		`{"agents":"hierarchy"}`:               "agents",
		`{"scopes":{"roles":["x"]}}`:           "scopes",
		`{"events":{"include":"x"}}`:           "events",
		`{"agents":{"include":[],"roles":[]}}`: "agents",
		`{"structure":"full"}`:                 "structure",
		`{"everything":"all"}`:                 "everything",
	}
	for in, field := range bad {
		_, err := ParseClientVisibility(json.RawMessage(in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: err %v, want field %q", in, err, field)
		}
	}
}

// TestClientVisibilityLayer: client visibility narrows the same
// predicates as the other layers; own agents stay visible and system
// participants are not restricted.
func TestClientVisibilityLayer(t *testing.T) {
	r := fakeReader{
		agents: map[string]registry.Agent{
			"w":    {ID: "w", OwnerID: "p-w", Role: "worker", Parent: "boss"},
			"boss": {ID: "boss", OwnerID: "p-boss", Role: "lead"},
			"mine": {ID: "mine", OwnerID: "bob"},
		},
		scopes: map[string]registry.Scope{
			"s": {ID: "s", OwnerID: "p-w"},
			"t": {ID: "t", OwnerID: "p-w"},
		},
	}
	parse := func(s string) *ClientVisibility {
		c, err := ParseClientVisibility(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	bob := func(c *ClientVisibility) Viewer {
		return Viewer{ParticipantID: "bob", ParticipantType: "client", Client: c}
	}
	roles := parse(`{"agents":{"roles":["worker"]},"scopes":{"include":["s"]},"events":{"include":["agent_registered"]},"structure":false}`)
	none := parse(`{"agents":"none","scopes":"none","events":"none"}`)
	cases := []struct {
		name string
		v    Viewer
		want map[string]bool // "agent:x", "scope:x", "event:x", "structure"
	}{
		{"unrestricted", bob(nil), map[string]bool{"agent:w": true, "agent:boss": true, "scope:t": true, "event:scope_created": true, "structure": true}},
		{"roles/include", bob(roles), map[string]bool{"agent:w": true, "agent:boss": false, "agent:mine": true,
			"scope:s": true, "scope:t": false, "event:agent_registered": true, "event:scope_created": false, "structure": false}},
		{"none", bob(none), map[string]bool{"agent:w": false, "agent:mine": true, "scope:s": false, "event:agent_registered": false, "structure": true}},
		{"system ignores it", Viewer{ParticipantID: "ops", ParticipantType: "system", Client: none},
			map[string]bool{"agent:w": true, "scope:s": true, "event:agent_registered": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, want := range tc.want {
				var got bool
				switch kind, id, _ := strings.Cut(k, ":"); kind {
				case "agent":
					a := r.agents[id]
					got = AgentVisible(r, tc.v, &a)
				case "scope":
					sc := r.scopes[id]
					got = ScopeVisible(r, tc.v, &sc)
				case "event":
					got = EventVisible(r, tc.v, &registry.Event{Type: id})
				case "structure":
					got = StructureOf(r, tc.v) == "full"
				}
				if got != want {
					t.Errorf("%s: got %v, want %v", k, got, want)
				}
			}
		})
	}
}

// FuzzParseClientVisibility: outside input (map/permissions/update) never
// panics, and what parses survives its canonical form unchanged.
func FuzzParseClientVisibility(f *testing.F) {
	f.Add([]byte(`{"agents":{"roles":["w"]},"scopes":"none","events":{"include":["agent_registered"]},"structure":false}`))
	f.Add([]byte(`{"agents":{"include":null}}`))
	f.Add([]byte(`{"scopes":{"include":[],"roles":[]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseClientVisibility(b)
		if err != nil {
			return
		}
		canon, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal %+v: %v", c, err)
		}
		back, err := ParseClientVisibility(canon)
		if err != nil {
			t.Fatalf("canonical %s does not parse: %v", canon, err)
		}
		if again, _ := json.Marshal(back); string(again) != string(canon) {
			t.Fatalf("canonical form not stable: %s then %s", canon, again)
		}
		v := Viewer{ParticipantID: "p", ParticipantType: "client", Client: &c}
		a := registry.Agent{ID: "a", Role: "w"}
		AgentVisible(fakeReader{}, v, &a)
		EventVisible(fakeReader{}, v, &registry.Event{Type: "agent_registered"})
	})
}
