package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// testClientPermissions: a system participant on node 1 withdraws the
// registerAgents action from bob and then limits his agents; bob's open
// session on node 2 is refused with the same errors node 1 would give,
// and gets the rights back when the system lifts them.
func testClientPermissions(t *testing.T, n1, n2 *node.Server, bob *client) {
	res, err := n1.ACLAdmin().CreateToken(context.Background(), &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "root", ParticipantTypes: []string{"system"}})
	if err != nil {
		t.Fatal(err)
	}
	sys := dial(t, n1).connectSystem(t, res.GetToken())
	update := func(perms map[string]any) map[string]any {
		return sys.call("map/permissions/update", map[string]any{"clientId": "bob", "permissions": perms})
	}
	register := func(id string) error {
		return tryCall(bob, "map/agents/register", map[string]any{"agentId": id})
	}
	refusedWith := func(id string, code int, key, want string) func() error {
		return func() error {
			err := register(id)
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != code || re.Data == nil || re.Data.Details[key] != want {
				return fmt.Errorf("register %s on node 2: %v, want %d with %s=%s", id, err, code, key, want)
			}
			return nil
		}
	}

	out := update(map[string]any{"actions": map[string]any{"registerAgents": false}})
	if cp, _ := out["clientPermissions"].(map[string]any); cp == nil || cp["actions"].(map[string]any)["registerAgents"] != false {
		t.Fatalf("permissions/update answered %v", out)
	}
	eventually(t, 10*time.Second, refusedWith("cp-1", rpc.CodePermissionDenied, "action", "registerAgents"))
	update(map[string]any{"actions": map[string]any{"registerAgents": true}})
	eventually(t, 10*time.Second, func() error { return register("cp-1") })

	// Limit bob to the agents he owns now: the next one is over quota.
	update(map[string]any{"limits": map[string]any{"agentsRegistered": 0}})
	eventually(t, 10*time.Second, refusedWith("cp-2", rpc.CodeQuotaExceeded, "limit", "agentsRegistered"))
	update(map[string]any{"limits": map[string]any{"agentsRegistered": nil}})
	eventually(t, 10*time.Second, func() error { return register("cp-2") })
	for _, id := range []string{"cp-1", "cp-2"} {
		bob.call("map/agents/unregister", map[string]any{"agentId": id})
	}

	// Client visibility set on node 1 narrows what a client on node 2
	// lists and replays; lifting it shows everything again.
	vic := dial(t, n2)
	vic.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client", "participantId": "vic"})
	lists := func(want int, only string) func() error {
		return func() error {
			agents, _ := vic.call("map/agents/list", nil)["agents"].([]any)
			if len(agents) != want && want >= 0 || only != "" && (len(agents) != 1 || agents[0].(map[string]any)["id"] != only) {
				return fmt.Errorf("vic on node 2 lists %v, want %d (%s)", agents, want, only)
			}
			return nil
		}
	}
	total := len(vic.call("map/agents/list", nil)["agents"].([]any))
	if total < 2 {
		t.Fatalf("need two agents for the visibility check, have %d", total)
	}
	sys.call("map/permissions/update", map[string]any{"clientId": "vic", "permissions": map[string]any{
		"visibility": map[string]any{"agents": map[string]any{"include": []string{"bob"}}, "events": map[string]any{"include": []string{"agent_registered"}}}}})
	eventually(t, 10*time.Second, lists(1, "bob"))
	evs, _ := vic.call("map/replay", map[string]any{"filter": map[string]any{}})["events"].([]any)
	if len(evs) == 0 {
		t.Fatal("vic replays no agent_registered event")
	}
	for _, ev := range evs {
		if typ := ev.(map[string]any)["event"].(map[string]any)["type"]; typ != "agent_registered" {
			t.Fatalf("vic replays a %v event past its events visibility", typ)
		}
	}
	sys.call("map/permissions/update", map[string]any{"clientId": "vic", "permissions": map[string]any{
		"visibility": map[string]any{"agents": "all", "events": "all"}}})
	eventually(t, 10*time.Second, lists(total, ""))
}
