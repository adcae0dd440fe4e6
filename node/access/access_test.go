package access

import (
	"testing"

	"github.com/concordmap/concord/node/registry"
)

type fakeReader struct {
	agents map[string]registry.Agent
	scopes map[string]registry.Scope
}

func (f fakeReader) Agent(id string) (registry.Agent, bool) { a, ok := f.agents[id]; return a, ok }
func (f fakeReader) Scope(id string) (registry.Scope, bool) { s, ok := f.scopes[id]; return s, ok }

func TestEventVisible(t *testing.T) {
	r := fakeReader{
		agents: map[string]registry.Agent{
			"a": {ID: "a", OwnerID: "alice"},
			"b": {ID: "b", OwnerID: "bob"},
			"c": {ID: "c", OwnerID: "carol", Visibility: "system"},
			"m": {ID: "m", OwnerID: "mallory", Scopes: []string{"team"}},
		},
		scopes: map[string]registry.Scope{
			"team": {ID: "team", OwnerID: "alice", Members: []string{"a", "m"}},
			"open": {ID: "open", OwnerID: "alice", MessageVisibility: "public", Members: []string{"a"}},
			"priv": {ID: "priv", OwnerID: "alice", Visibility: "system"},
		},
	}
	v := func(pid, ptype string) Viewer { return Viewer{ParticipantID: pid, ParticipantType: ptype} }
	direct := registry.Event{Type: "message_sent", Source: "a", AgentIDs: []string{"a", "b"}}
	toTeam := registry.Event{Type: "message_sent", Source: "a", AgentIDs: []string{"a"}, ScopeIDs: []string{"team"}}
	toOpen := registry.Event{Type: "message_delivered", Source: "a", ScopeIDs: []string{"open"}}
	aboutC := registry.Event{Type: "agent_state_changed", AgentIDs: []string{"c"}}
	aboutPriv := registry.Event{Type: "scope_created", ScopeIDs: []string{"priv"}}
	gone := registry.Event{Type: "agent_unregistered", AgentIDs: []string{"zed"}}
	cases := []struct {
		name string
		v    Viewer
		ev   registry.Event
		want bool
	}{
		{"sender's owner", v("alice", "agent"), direct, true},
		{"recipient's owner", v("bob", "agent"), direct, true},
		{"bystander", v("eve", "client"), direct, false},
		{"system", v("ops", "system"), direct, true},
		{"scope member, messageVisibility unset", v("mallory", "agent"), toTeam, true},
		{"non-member of the scope", v("bob", "agent"), toTeam, false},
		{"public scope message", v("eve", "client"), toOpen, true},
		{"event about a system-only agent", v("eve", "client"), aboutC, false},
		{"its owner sees it", v("carol", "agent"), aboutC, true},
		{"event about a system scope", v("bob", "agent"), aboutPriv, false},
		{"the scope's owner", v("alice", "agent"), aboutPriv, true},
		{"entity gone", v("eve", "client"), gone, true},
	}
	for _, tc := range cases {
		if got := EventVisible(r, tc.v, &tc.ev); got != tc.want {
			t.Errorf("%s: EventVisible = %v, want %v", tc.name, got, tc.want)
		}
	}
}
