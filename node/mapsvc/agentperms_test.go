package mapsvc

import (
	"testing"

	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/rpc"
)

// TestAgentPermissions_Changes: permissionOverrides are validated, set
// by the registering participant, changed at run time only by a system
// participant or an ancestor's owner, and inherited from a restricted
// parent; canSee narrows what the participant lists and gets.
func TestAgentPermissions_Changes(t *testing.T) {
	e := newEnv(t)
	lead, worker, sys := e.dial(), e.dial(), e.dial()
	connectAs(lead, TypeAgent, map[string]any{"participantId": "lead"})
	connectAs(worker, TypeAgent, map[string]any{"participantId": "w"})
	connectAs(sys, TypeSystem, map[string]any{"participantId": "ops"})

	e.refused(lead, "map/agents/register", `{"agentId":"x","permissionOverrides":{"canSee":{"agents":"everyone"}}}`,
		rpc.CodeInvalidParams, "permissionOverrides.canSee.agents")
	e.refused(lead, "map/agents/register", `{"agentId":"x","permissionOverrides":{"canFly":{}}}`,
		rpc.CodeInvalidParams, "permissionOverrides.canFly")
	lead.must("map/agents/register", `{"agentId":"lead"}`)
	lead.must("map/agents/register", `{"agentId":"other"}`)
	worker.must("map/agents/register", `{"agentId":"w","parent":"lead","permissionOverrides":{"canSee":{"agents":"hierarchy"}}}`)

	// The worker sees only its kin.
	if got := ids(worker.must("map/agents/list", nil)["agents"]); len(got) != 2 || got[0] != "lead" || got[1] != "w" {
		t.Fatalf("restricted worker lists %v, want [lead w]", got)
	}
	worker.fails("map/agents/get", `{"agentId":"other"}`, rpc.CodeAgentNotFound)
	// ... and cannot lift its own restriction; the parent's owner and a
	// system participant can change it.
	e.refused(worker, "map/agents/update", `{"agentId":"w","permissionOverrides":{}}`, rpc.CodePermissionDenied)
	lead.must("map/agents/update", `{"agentId":"w","permissionOverrides":{"canSee":{"agents":"scoped"}}}`)
	sys.must("map/agents/update", `{"agentId":"w","permissionOverrides":{"canSee":{"agents":{"include":["other"]}}}}`)
	if got := ids(worker.must("map/agents/list", nil)["agents"]); len(got) != 2 || got[0] != "other" || got[1] != "w" {
		t.Fatalf("after the system's change the worker lists %v, want [other w]", got)
	}
	// A child of a restricted agent inherits its permissions and cannot
	// name wider ones.
	e.refused(worker, "map/agents/register", `{"agentId":"w2","parent":"w","permissionOverrides":{}}`, rpc.CodePermissionDenied)
	child := worker.must("map/agents/register", `{"agentId":"w3","parent":"w"}`)["agent"].(map[string]any)
	if child["permissionOverrides"] == nil {
		t.Fatalf("child of a restricted parent has no permissions: %v", child)
	}
}

func ids(v any) []string {
	var out []string
	for _, a := range v.([]any) {
		out = append(out, a.(map[string]any)["id"].(string))
	}
	return out
}

type fakeCeilings map[string][]string

func (f fakeCeilings) Denied(pid string) []string { return f[pid] }

func (f fakeCeilings) Limits(string) map[string]int64 { return nil }

func (f fakeCeilings) Visibility(string) *access.ClientVisibility { return nil }

// TestPermissionsUpdate_Refusals: map/permissions/update is for system
// participants, names known capabilities, and a stored ceiling narrows
// open sessions at once. (The Raft path is covered by the cluster test.)
func TestPermissionsUpdate_Refusals(t *testing.T) {
	ceil := fakeCeilings{}
	e := newEnv(t, func(c *Config) { c.ParticipantPermissions = ceil })
	agent, sys := e.dial(), e.dial()
	connectAs(agent, TypeAgent, map[string]any{"participantId": "bob"})
	connectAs(sys, TypeSystem, map[string]any{"participantId": "ops"})
	upd := `{"clientId":"bob","permissions":{"lifecycle":{"canRegister":false}}}`
	e.refused(agent, "map/permissions/update", upd, rpc.CodePermissionDenied)
	e.refused(sys, "map/permissions/update", `{"clientId":"bob","permissions":{"lifecycle":{"canFly":false}}}`,
		rpc.CodeInvalidParams, "permissions.lifecycle.canFly")
	e.refused(sys, "map/permissions/update", `{"permissions":{}}`, rpc.CodeInvalidParams, "clientId")
	e.refused(sys, "map/permissions/update", `{"clientId":"bob"}`, rpc.CodeInvalidParams, "permissions")
	agent.must("map/agents/register", `{"agentId":"b1"}`)
	ceil["bob"] = []string{"lifecycle.canRegister"}
	e.refused(agent, "map/agents/register", `{"agentId":"b2"}`, rpc.CodePermissionDenied)
	ceil["carl"] = []string{"lifecycle.canRegister"}
	caps := connectAs(e.dial(), TypeAgent, map[string]any{"participantId": "carl"})["capabilities"].(map[string]any)
	if caps["lifecycle"].(map[string]any)["canRegister"] != false {
		t.Fatalf("connect advertises capabilities beyond the ceiling: %v", caps)
	}
	delete(ceil, "bob")
	agent.must("map/agents/register", `{"agentId":"b2"}`)
}

// TestAgentPermissions_Structure: canSee.structure none hides every graph
// edge, local keeps the edges touching the participant's own agents.
func TestAgentPermissions_Structure(t *testing.T) {
	e := newEnv(t)
	owner, local, blind := e.dial(), e.dial(), e.dial()
	connectAs(owner, TypeAgent, map[string]any{"participantId": "owner"})
	connectAs(local, TypeAgent, map[string]any{"participantId": "local"})
	connectAs(blind, TypeAgent, map[string]any{"participantId": "blind"})
	owner.must("map/agents/register", `{"agentId":"root"}`)
	owner.must("map/agents/register", `{"agentId":"kid","parent":"root"}`)
	local.must("map/agents/register", `{"agentId":"l","parent":"root","permissionOverrides":{"canSee":{"structure":"local"}}}`)
	blind.must("map/agents/register", `{"agentId":"b","permissionOverrides":{"canSee":{"structure":"none"}}}`)
	edges := func(c *client) []string {
		var out []string
		for _, e := range c.must("map/structure/graph", nil)["edges"].([]any) {
			m := e.(map[string]any)
			out = append(out, m["from"].(string)+">"+m["to"].(string))
		}
		return out
	}
	if got := edges(owner); len(got) != 2 {
		t.Fatalf("unrestricted graph edges %v, want root>kid and root>l", got)
	}
	if got := edges(local); len(got) != 1 || got[0] != "root>l" {
		t.Fatalf("local structure edges %v, want [root>l]", got)
	}
	if got := edges(blind); len(got) != 0 {
		t.Fatalf("structure none edges %v", got)
	}
}
