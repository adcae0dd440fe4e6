package mapsvc

import (
	"slices"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

func TestScopes(t *testing.T) {
	e, ag, cl := agentEnv(t)
	res := ag.must("map/scopes/create", `{"scopeId":"root","name":"Root","joinPolicy":"open","metadata":{"a":1}}`)
	sc := res["scope"].(map[string]any)
	if sc["id"] != "root" || sc["persistent"] != true || sc["autoDelete"] != false || sc["name"] != "Root" {
		t.Fatalf("create %v", res)
	}
	gen := ag.must("map/scopes/create", `{"parent":"root"}`)["scope"].(map[string]any)
	if id, _ := gen["id"].(string); !strings.HasPrefix(id, "scope-") || gen["parent"] != "root" {
		t.Fatalf("generated scope %v", gen)
	}
	e.refused(ag, "map/scopes/create", `{"scopeId":"x","joinPolicy":"closed"}`, rpc.CodeInvalidParams, "joinPolicy")
	e.refused(ag, "map/scopes/create", `{"scopeId":"x","sendPolicy":"anyone"}`, rpc.CodeInvalidParams, "sendPolicy")
	e.refused(ag, "map/scopes/create", `{"scopeId":"x","autoDelete":1}`, rpc.CodeInvalidParams, "autoDelete")
	e.refused(cl, "map/scopes/create", `{"scopeId":"x"}`, rpc.CodePermissionDenied)
	e.refused(ag, "map/scopes/create", `{"scopeId":"x","parent":"nope"}`, rpc.CodeScopeNotFound)
	e.refused(ag, "map/scopes/create", `{"scopeId":"root"}`, rpc.CodeInvalidParams)

	for _, id := range []string{"a", "b", "c"} {
		ag.must("map/agents/register", `{"agentId":"`+id+`"}`)
		j := ag.must("map/scopes/join", `{"scopeId":"root","agentId":"`+id+`"}`)
		if j["joined"] != true || j["agent"].(map[string]any)["id"] != id {
			t.Fatalf("join %v", j)
		}
	}
	e.refused(ag, "map/scopes/join", `{"scopeId":"nope","agentId":"a"}`, rpc.CodeScopeNotFound)
	e.refused(ag, "map/scopes/join", `{"scopeId":"root","agentId":"nope"}`, rpc.CodeAgentNotFound)
	e.refused(ag, "map/scopes/join", `{"scopeId":"root"}`, rpc.CodeInvalidParams, "agentId")
	e.refused(cl, "map/scopes/join", `{"scopeId":"root","agentId":"a"}`, rpc.CodePermissionDenied)

	get := cl.must("map/scopes/get", `{"scopeId":"root"}`)
	if get["scope"].(map[string]any)["id"] != "root" {
		t.Fatalf("get %v", get)
	}
	e.refused(cl, "map/scopes/get", `{"scopeId":"nope"}`, rpc.CodeScopeNotFound)
	list := cl.must("map/scopes/list", nil)["scopes"].([]any)
	if len(list) != 2 {
		t.Fatalf("list %v", list)
	}
	if kids := cl.must("map/scopes/list", `{"parent":"root"}`)["scopes"].([]any); len(kids) != 1 {
		t.Fatalf("list by parent %v", kids)
	}
	m := cl.must("map/scopes/members", `{"scopeId":"root","limit":2}`)
	if !slices.Equal(toStrings(m["members"]), []string{"a", "b"}) || m["nextCursor"] != "b" {
		t.Fatalf("members page 1 %v", m)
	}
	m = cl.must("map/scopes/members", `{"scopeId":"root","limit":2,"cursor":"b"}`)
	if !slices.Equal(toStrings(m["members"]), []string{"c"}) || m["nextCursor"] != nil {
		t.Fatalf("members page 2 %v", m)
	}
	e.refused(cl, "map/scopes/members", `{"scopeId":"nope"}`, rpc.CodeScopeNotFound)

	l := ag.must("map/scopes/leave", `{"scopeId":"root","agentId":"a"}`)
	if l["left"] != true || len(l["scope"].(map[string]any)) == 0 {
		t.Fatalf("leave %v", l)
	}
	if sc, _ := e.reg.Scope("root"); !slices.Equal(sc.Members, []string{"b", "c"}) {
		t.Fatalf("members after leave %v", sc.Members)
	}
	e.refused(ag, "map/scopes/delete", `{"scopeId":"root"}`, rpc.CodeInvalidRequest) // has a child scope
	d := ag.must("map/scopes/delete", map[string]any{"scopeId": gen["id"]})
	if d["deleted"] != true {
		t.Fatalf("delete %v", d)
	}
	ag.must("map/scopes/delete", `{"scopeId":"root"}`)
	e.refused(ag, "map/scopes/delete", `{"scopeId":"root"}`, rpc.CodeScopeNotFound)
	if a, _ := e.reg.Agent("b"); len(a.Scopes) != 0 {
		t.Fatalf("agent keeps deleted scope %v", a.Scopes)
	}
}

func TestSubscriptionsDelegateToFanout(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	res := connectAs(c, TypeClient, nil)
	sid := res["sessionId"].(string)
	if r := c.must("map/subscribe", `{"filter":{"eventTypes":["agent_registered"]}}`); r["subscriptionId"] != "sub-1" {
		t.Fatalf("subscribe %v", r)
	}
	c.must("map/replay", `{"limit":10}`)
	c.must("map/unsubscribe", `{"subscriptionId":"sub-1"}`)
	if err := c.conn.Notify("map/subscribe.ack", map[string]any{"subscriptionId": "sub-1", "upToSequence": 3}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5e9, func() error {
		f := e.fanout.entries()
		want := []string{"attach " + sid, `subscribe ` + sid + ` {"filter":{"eventTypes":["agent_registered"]}}`, "replay " + sid, "unsubscribe " + sid, "ack " + sid}
		if !slices.Equal(f, want) {
			return errorf("fanout saw %q", f)
		}
		return nil
	})
	blind := e.dial()
	connectAs(blind, TypeClient, map[string]any{"capabilities": map[string]any{"observation": map[string]any{"canObserve": false}}})
	e.refused(blind, "map/subscribe", `{}`, rpc.CodePermissionDenied)

	// Without a fanout the methods are not mounted; without a router map/send.
	bare := newEnv(t, func(c *Config) { c.Fanout, c.Router = nil, nil })
	bc := bare.dial()
	r := connectAs(bc, TypeClient, nil)
	if r["capabilities"].(map[string]any)["observation"].(map[string]any)["canObserve"] != false {
		t.Fatal("canObserve advertised without a fanout")
	}
	bare.refused(bc, "map/subscribe", `{}`, rpc.CodeMethodNotFound)
	bare.refused(bc, "map/send", `{"to":"x"}`, rpc.CodeMethodNotFound)
}
