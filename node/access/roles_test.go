package access

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/registry"
)

type roleReader struct {
	fakeReader
	roles map[string]json.RawMessage
}

func (r roleReader) RolePermissions(role string) json.RawMessage { return r.roles[role] }

func TestParseRolePermissions(t *testing.T) {
	if _, err := ParseRolePermissions([]byte(`{"worker":{"canSee":{"agents":"hierarchy"}},"lead":{}}`)); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`[]`:                                   "object of role",
		`{"":{}}`:                              "empty role",
		`{"worker":{"canSee":{"agents":"x"}}}`: "worker.canSee.agents",
	} {
		if _, err := ParseRolePermissions([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want it to mention %q", in, err, want)
		}
	}
}

// TestEffectivePermissions: defaults, then rolePermissions[role], then the
// agent's overrides, key by key.
func TestEffectivePermissions(t *testing.T) {
	r := roleReader{roles: map[string]json.RawMessage{
		"worker": json.RawMessage(`{"canSee":{"agents":"hierarchy","scopes":"member"},"acceptsFrom":{"clients":"none"}}`),
	}}
	cases := []struct {
		name      string
		agent     registry.Agent
		seeAgents string
		seeScopes string
		clients   string
	}{
		{"no role", registry.Agent{ID: "a"}, "", "", ""},
		{"unknown role", registry.Agent{ID: "a", Role: "lead"}, "", "", ""},
		{"role only", registry.Agent{ID: "a", Role: "worker"}, RuleHierarchy, RuleMember, RuleNone},
		{"override replaces one key", registry.Agent{ID: "a", Role: "worker",
			PermissionOverrides: json.RawMessage(`{"canSee":{"agents":"all"}}`)}, RuleAll, RuleMember, RuleNone},
		{"overrides without role", registry.Agent{ID: "a", PermissionOverrides: json.RawMessage(`{"canSee":{"agents":"scoped"}}`)}, RuleScoped, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := EffectivePermissions(r, &tc.agent)
			if p.SeeAgents.Kind != tc.seeAgents || p.SeeScopes.Kind != tc.seeScopes || p.AcceptClients.Kind != tc.clients {
				t.Fatalf("got %+v", p)
			}
		})
	}
	// A reader without roles ignores the role.
	if p := EffectivePermissions(fakeReader{}, &registry.Agent{ID: "a", Role: "worker"}); !p.Unrestricted() {
		t.Fatalf("role applied without a RoleReader: %+v", p)
	}
}
