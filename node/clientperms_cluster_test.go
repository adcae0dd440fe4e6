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
}
