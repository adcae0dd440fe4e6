package mapsvc

import (
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// TestPermissions_ScopesAndLifecycle: scope owners manage their scopes,
// join policies hold, and lifecycle verbs need control of the agent.
func TestPermissions_ScopesAndLifecycle(t *testing.T) {
	e := newEnv(t)
	owner, other, sys := e.dial(), e.dial(), e.dial()
	connectAs(owner, TypeAgent, map[string]any{"participantId": "owner"})
	connectAs(other, TypeAgent, map[string]any{"participantId": "other"})
	connectAs(sys, TypeSystem, map[string]any{"participantId": "ops"})
	owner.must("map/agents/register", `{"agentId":"o1","role":"lead"}`)
	other.must("map/agents/register", `{"agentId":"x1","role":"worker"}`)
	other.must("map/agents/register", `{"agentId":"x2","role":"lead"}`)
	for _, sc := range []string{
		`{"scopeId":"open"}`, `{"scopeId":"inv","joinPolicy":"invite"}`,
		`{"scopeId":"roles","joinPolicy":"role","autoJoinRoles":["lead"]}`, `{"scopeId":"sys","joinPolicy":"system"}`,
	} {
		if got := owner.must("map/scopes/create", sc)["scope"].(map[string]any)["ownerId"]; got != "owner" {
			t.Fatalf("scope owner %v", got)
		}
	}
	join := func(scope, agent string) map[string]any {
		return map[string]any{"scopeId": scope, "agentId": agent}
	}
	other.must("map/scopes/join", join("open", "x1"))
	e.refused(other, "map/scopes/join", join("open", "o1"), rpc.CodePermissionDenied) // not its agent
	e.refused(other, "map/scopes/join", join("inv", "x1"), rpc.CodePermissionDenied)
	owner.must("map/scopes/join", join("inv", "x1")) // the owner invites
	e.refused(other, "map/scopes/join", join("roles", "x1"), rpc.CodePermissionDenied)
	other.must("map/scopes/join", join("roles", "x2"))
	e.refused(owner, "map/scopes/join", join("sys", "o1"), rpc.CodePermissionDenied)
	sys.must("map/scopes/join", join("sys", "o1"))
	owner.must("map/scopes/leave", join("inv", "x1")) // the owner manages members
	e.refused(other, "map/scopes/leave", join("sys", "o1"), rpc.CodePermissionDenied)

	e.refused(other, "map/scopes/delete", `{"scopeId":"open"}`, rpc.CodePermissionDenied)
	owner.must("map/scopes/delete", `{"scopeId":"inv"}`)
	sys.must("map/scopes/delete", `{"scopeId":"roles"}`)
	e.refused(other, "map/scopes/delete", `{"scopeId":"nope"}`, rpc.CodeScopeNotFound)

	for _, m := range []string{"map/agents/stop", "map/agents/suspend", "map/agents/resume"} {
		e.refused(other, m, `{"agentId":"o1"}`, rpc.CodePermissionDenied)
	}
	sys.must("map/agents/suspend", `{"agentId":"o1"}`)
	owner.must("map/agents/resume", `{"agentId":"o1"}`)
}
