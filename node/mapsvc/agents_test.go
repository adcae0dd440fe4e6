package mapsvc

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// agentEnv: one agent participant (pid "owner") and one client.
func agentEnv(t *testing.T) (*env, *client, *client) {
	e := newEnv(t)
	ag := e.dial()
	connectAs(ag, TypeAgent, map[string]any{"participantId": "owner"})
	cl := e.dial()
	connectAs(cl, TypeClient, nil)
	return e, ag, cl
}

func TestAgents_Register(t *testing.T) {
	e, ag, _ := agentEnv(t)
	ag.must("map/scopes/create", `{"scopeId":"team"}`)
	res := ag.must("map/agents/register", `{"agentId":"a1","name":"A","role":"worker","scopes":["team"],
		"visibility":"public","metadata":{"k":[1,2]},"capabilities":{"messaging":{"canSend":true}},
		"capabilityDescriptor":{"id":"cd","capabilities":[{"id":"summarize"}],"tags":["nlp"]},
		"environment":{"os":{"type":"linux"}},"unknownExtra":true}`)
	a := agentOf(res)
	if a["id"] != "a1" || a["state"] != "registered" || a["ownerId"] != "owner" || a["role"] != "worker" {
		t.Fatalf("agent %v", a)
	}
	if _, ok := res["resumed"]; ok {
		t.Fatal("resumed set on a fresh register")
	}
	ra, _ := e.reg.Agent("a1")
	if ra.HomeNode != "n1" || string(ra.Metadata) != `{"k":[1,2]}` || !slices.Equal(ra.Scopes, []string{"team"}) {
		t.Fatalf("registry agent %+v", ra)
	}
	gen := agentOf(ag.must("map/agents/register", `{}`))
	if id, _ := gen["id"].(string); len(id) != 26 {
		t.Fatalf("generated id %v", gen["id"])
	}

	other := e.dial()
	connectAs(other, TypeAgent, map[string]any{"participantId": "intruder"})
	cases := []struct {
		params string
		code   int
		field  string
	}{
		{`{"agentId":"a1"}`, rpc.CodeAgentExists, ""},
		{`{"agentId":"x","parent":"nope"}`, rpc.CodeAgentNotFound, ""},
		{`{"agentId":"x","scopes":["nope"]}`, rpc.CodeScopeNotFound, ""},
		{`{"agentId":"x","visibility":"everyone"}`, rpc.CodeInvalidParams, "visibility"},
		{`{"agentId":5}`, rpc.CodeInvalidParams, "agentId"},
		{`{"agentId":"x","scopes":"team"}`, rpc.CodeInvalidParams, "scopes"},
		{`{"agentId":"x","metadata":[1]}`, rpc.CodeInvalidParams, "metadata"},
		{`{"agentId":"x","persistentIdentity":{}}`, rpc.CodeInvalidParams, "persistentIdentity.persistentId"},
		{`{"agentId":"x","resumePersistentIdentity":"yes"}`, rpc.CodeInvalidParams, "resumePersistentIdentity"},
	}
	for _, tc := range cases {
		t.Run(tc.params, func(t *testing.T) {
			other.t = t
			if tc.field != "" {
				e.refused(other, "map/agents/register", tc.params, tc.code, tc.field)
			} else {
				// Domain errors too: the leader pre-checks with the
				// registry's own validation and writes nothing.
				e.refused(other, "map/agents/register", tc.params, tc.code)
			}
		})
	}
}

func TestAgents_PersistentIdentityResume(t *testing.T) {
	e := newEnv(t)
	c1 := e.dial()
	connectAs(c1, TypeAgent, map[string]any{"participantId": "p1", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	c1.must("map/agents/register", `{"agentId":"old","persistentIdentity":{"persistentId":"pid-9","identityType":"keypair"}}`)
	c1.must("map/disconnect", nil)
	c2 := e.dial()
	connectAs(c2, TypeAgent, map[string]any{"participantId": "p2"})
	res := c2.must("map/agents/register", `{"agentId":"new","persistentIdentity":{"persistentId":"pid-9","identityType":"keypair"},"resumePersistentIdentity":true}`)
	if res["resumed"] != true || agentOf(res)["id"] != "old" || agentOf(res)["ownerId"] != "p2" {
		t.Fatalf("result %v", res)
	}
	if from := res["resumedFrom"].(map[string]any); from["previousSessionId"] == "" {
		t.Fatalf("resumedFrom %v", from)
	}
}

func TestAgents_GetListGraph(t *testing.T) {
	e, ag, cl := agentEnv(t)
	ag.must("map/scopes/create", `{"scopeId":"s"}`)
	ag.must("map/agents/register", `{"agentId":"root","role":"lead"}`)
	ag.must("map/agents/register", `{"agentId":"c1","parent":"root","role":"worker","scopes":["s"],"capabilityDescriptor":{"capabilities":[{"id":"x"}],"tags":["t1"],"accepts":[{"contentType":"text/plain"}]}}`)
	ag.must("map/agents/register", `{"agentId":"c2","parent":"root","role":"worker","relationships":[{"type":"peer","agentId":"c1"}]}`)
	ag.must("map/agents/register", `{"agentId":"g1","parent":"c1","persistentIdentity":{"persistentId":"pp","identityType":"platform"}}`)

	get := cl.must("map/agents/get", `{"agentId":"c1","include":{"parent":true,"children":true,"siblings":true,"ancestors":true,"descendants":true}}`)
	ids := func(v any) []string {
		var out []string
		for _, x := range v.([]any) {
			out = append(out, x.(map[string]any)["id"].(string))
		}
		return out
	}
	if agentOf(get)["id"] != "c1" || get["parent"].(map[string]any)["id"] != "root" ||
		!slices.Equal(ids(get["children"]), []string{"g1"}) || !slices.Equal(ids(get["siblings"]), []string{"c2"}) ||
		!slices.Equal(ids(get["ancestors"]), []string{"root"}) || !slices.Equal(ids(get["descendants"]), []string{"g1"}) {
		t.Fatalf("get %v", get)
	}
	e.refused(cl, "map/agents/get", `{"agentId":"nope"}`, rpc.CodeAgentNotFound)
	e.refused(cl, "map/agents/get", `{}`, rpc.CodeInvalidParams, "agentId")
	e.refused(cl, "map/agents/get", `{"agentId":"c1","include":{"maxDepth":0}}`, rpc.CodeInvalidParams, "include.maxDepth")
	// Linearizable read on request.
	cl.must("map/agents/get", `{"agentId":"c1","_meta":{"consistency":"linearizable"}}`)

	list := func(p string) []string {
		t.Helper()
		return ids(cl.must("map/agents/list", p)["agents"])
	}
	cases := []struct {
		params string
		want   []string
	}{
		{``, []string{"c1", "c2", "g1", "root"}},
		{`{}`, []string{"c1", "c2", "g1", "root"}},
		{`{"filter":{"roles":["worker"]}}`, []string{"c1", "c2"}},
		{`{"filter":{"parent":"root"}}`, []string{"c1", "c2"}},
		{`{"filter":{"scopes":["s"]}}`, []string{"c1"}},
		{`{"filter":{"hasChildren":true}}`, []string{"c1", "root"}},
		{`{"filter":{"hasChildren":false,"roles":["worker"]}}`, []string{"c2"}},
		{`{"filter":{"states":["registered"],"ownerId":"owner"}}`, []string{"c1", "c2", "g1", "root"}},
		{`{"filter":{"capabilityId":"x"}}`, []string{"c1"}},
		{`{"filter":{"tags":["t1"],"accepts":"text/plain"}}`, []string{"c1"}},
		{`{"filter":{"persistentId":"pp"}}`, []string{"g1"}},
	}
	for _, tc := range cases {
		var p any
		if tc.params != "" {
			p = tc.params
		}
		var got []string
		if p == nil {
			got = ids(cl.must("map/agents/list", nil)["agents"])
		} else {
			got = list(tc.params)
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("list %s = %v, want %v", tc.params, got, tc.want)
		}
	}
	// Pagination.
	page := cl.must("map/agents/list", `{"limit":3}`)
	if !slices.Equal(ids(page["agents"]), []string{"c1", "c2", "g1"}) || page["nextCursor"] != "g1" {
		t.Fatalf("page 1 %v", page)
	}
	page = cl.must("map/agents/list", `{"limit":3,"cursor":"g1"}`)
	if !slices.Equal(ids(page["agents"]), []string{"root"}) || page["nextCursor"] != nil {
		t.Fatalf("page 2 %v", page)
	}
	e.refused(cl, "map/agents/list", `{"limit":0}`, rpc.CodeInvalidParams, "limit")
	e.refused(cl, "map/agents/list", `{"filter":{"states":"idle"}}`, rpc.CodeInvalidParams, "filter.states")
	e.refused(cl, "map/agents/list", `{"filter":[]}`, rpc.CodeInvalidParams, "filter")

	// Graph: the conformance pack wants the agent in nodes for {}.
	g := cl.must("map/structure/graph", `{}`)
	if !slices.Equal(ids(g["nodes"]), []string{"c1", "c2", "g1", "root"}) {
		t.Fatalf("graph nodes %v", g["nodes"])
	}
	edges := fmt.Sprint(g["edges"])
	for _, want := range []string{"from:root to:c1 type:parent-child", "from:c1 to:g1 type:parent-child", "from:c2 to:c1 type:peer"} {
		if !strings.Contains(edges, want) {
			t.Fatalf("edges %s lack %s", edges, want)
		}
	}
	g = cl.must("map/structure/graph", `{"rootAgentId":"root","depth":1,"includeRelationships":false}`)
	if !slices.Equal(ids(g["nodes"]), []string{"root", "c1", "c2"}) || len(g["edges"].([]any)) != 2 {
		t.Fatalf("rooted graph %v", g)
	}
	e.refused(cl, "map/structure/graph", `{"rootAgentId":"nope"}`, rpc.CodeAgentNotFound)
	e.refused(cl, "map/structure/graph", `{"depth":0}`, rpc.CodeInvalidParams, "depth")
}

func TestAgents_UpdateUnregisterAndOwnership(t *testing.T) {
	e, ag, cl := agentEnv(t)
	ag.must("map/agents/register", `{"agentId":"a1"}`)
	ag.must("map/agents/register", `{"agentId":"kid","parent":"a1"}`)
	// The SDK moves freely between states.
	for _, st := range []string{"busy", "idle", "registered", "x-thinking", "stopped"} {
		if got := agentOf(ag.must("map/agents/update", map[string]any{"agentId": "a1", "state": st}))["state"]; got != st {
			t.Fatalf("state %v, want %s", got, st)
		}
	}
	e.refused(ag, "map/agents/update", `{"agentId":"a1","state":"dancing"}`, rpc.CodeInvalidParams, "state")
	e.refused(ag, "map/agents/update", `{"agentId":"a1","state":"idle"}`, rpc.CodeStateInvalid) // leaving stopped
	res := ag.must("map/agents/update", `{"agentId":"kid","metadata":{"exitCode":0},"environment":{"x":1},"name":"K"}`)
	if a := agentOf(res); a["name"] != "K" || a["metadata"].(map[string]any)["exitCode"] != float64(0) {
		t.Fatalf("update %v", res)
	}
	e.refused(ag, "map/agents/update", `{"agentId":"kid","metadata":"x"}`, rpc.CodeInvalidParams, "metadata")
	e.refused(ag, "map/agents/update", `{}`, rpc.CodeInvalidParams, "agentId")
	e.refused(cl, "map/agents/update", `{"agentId":"kid"}`, rpc.CodePermissionDenied) // clients may not

	intruder := e.dial()
	connectAs(intruder, TypeAgent, map[string]any{"participantId": "intruder"})
	e.refused(intruder, "map/agents/update", `{"agentId":"kid","name":"mine"}`, rpc.CodePermissionDenied)
	e.refused(intruder, "map/agents/unregister", `{"agentId":"kid"}`, rpc.CodePermissionDenied)
	sys := e.dial()
	connectAs(sys, TypeSystem, nil)
	sys.must("map/agents/update", `{"agentId":"kid","name":"by system"}`)

	un := ag.must("map/agents/unregister", `{"agentId":"kid","reason":"done"}`)
	if un["unregistered"] != true || agentOf(un)["id"] != "kid" {
		t.Fatalf("unregister %v", un)
	}
	e.refused(ag, "map/agents/unregister", `{"agentId":"kid"}`, rpc.CodeAgentNotFound)
}

func TestAgents_LifecycleConformance(t *testing.T) {
	e, ag, cl := agentEnv(t)
	ag.must("map/agents/register", `{"agentId":"a1"}`)
	steps := []struct{ method, key, state string }{
		{"map/agents/suspend", "suspended", "suspended"},
		{"map/agents/resume", "resumed", "idle"},
		{"map/agents/stop", "stopping", "stopped"},
	}
	// Lifecycle verbs need control of the agent: a client that does not
	// own it is refused; its owner (here) or a system participant may.
	for _, st := range steps {
		e.refused(cl, st.method, `{"agentId":"a1"}`, rpc.CodePermissionDenied)
		res := ag.must(st.method, `{"agentId":"a1","reason":"test"}`)
		if res[st.key] != true || agentOf(res)["state"] != st.state {
			t.Fatalf("%s: %v", st.method, res)
		}
	}
	e.refused(ag, "map/agents/resume", `{"agentId":"a1"}`, rpc.CodeStateInvalid)
	e.refused(ag, "map/agents/stop", `{"agentId":"a1","force":true}`, rpc.CodeStateInvalid)
	e.refused(cl, "map/agents/suspend", `{"agentId":"nope"}`, rpc.CodeAgentNotFound)
	e.refused(cl, "map/agents/stop", `{"agentId":"a1","force":"yes"}`, rpc.CodeInvalidParams, "force")
	gw := e.dial()
	connectAs(gw, TypeGateway, nil)
	e.refused(gw, "map/agents/stop", `{"agentId":"a1"}`, rpc.CodePermissionDenied)
	noStop := e.dial()
	connectAs(noStop, TypeClient, map[string]any{"capabilities": map[string]any{"lifecycle": map[string]any{"canStop": false}}})
	e.refused(noStop, "map/agents/suspend", `{"agentId":"a1"}`, rpc.CodePermissionDenied)
}

func TestAgents_SpawnAndSend(t *testing.T) {
	e, ag, cl := agentEnv(t)
	ag.must("map/agents/register", `{"agentId":"parent"}`)
	res := ag.must("map/agents/spawn", `{"agentId":"child","parent":"parent","requestedScopes":[],
		"initialMessage":{"payload":{"task":"go"},"meta":{"correlationId":"c-1"}},"ttlMinutes":5}`)
	if agentOf(res)["id"] != "child" || res["messageId"] != "m-1" {
		t.Fatalf("spawn %v", res)
	}
	calls := e.router.calls()
	if len(calls) != 1 || calls[0].from.AgentID != "parent" || calls[0].from.ParticipantID != "owner" {
		t.Fatalf("router calls %+v", calls)
	}
	var sent map[string]any
	_ = json.Unmarshal(calls[0].params, &sent)
	if sent["to"].(map[string]any)["agent"] != "child" || sent["payload"].(map[string]any)["task"] != "go" ||
		sent["meta"].(map[string]any)["correlationId"] != "c-1" {
		t.Fatalf("initial message %s", calls[0].params)
	}
	e.refused(ag, "map/agents/spawn", `{"ttlMinutes":0}`, rpc.CodeInvalidParams, "ttlMinutes")
	e.refused(ag, "map/agents/spawn", `{"initialMessage":"hi"}`, rpc.CodeInvalidParams, "initialMessage")

	// Router failure after registration: the agent stays, the error is reported.
	e.router.mu.Lock()
	e.router.err = rpc.NewError(rpc.CodeDeliveryFailed, "")
	e.router.mu.Unlock()
	res = ag.must("map/agents/spawn", `{"agentId":"child2","initialMessage":{"payload":1}}`)
	if res["initialMessageError"].(map[string]any)["code"] != float64(rpc.CodeDeliveryFailed) {
		t.Fatalf("spawn with failing router %v", res)
	}
	if _, ok := e.reg.Agent("child2"); !ok {
		t.Fatal("spawned agent missing")
	}
	if sid, ok := e.svc.LocalAgentSession("child2"); !ok || sid == "" {
		t.Fatal("spawned agent not reachable through a local session")
	}
	if _, ok := e.svc.LocalAgentSession("nope"); ok {
		t.Fatal("unknown agent has a local session")
	}
	e.router.mu.Lock()
	e.router.err = nil
	e.router.mu.Unlock()

	// map/send: the sender's agent is the participant's own agent.
	ag.must("map/send", `{"to":{"agent":"child"},"payload":"x"}`)
	last := e.router.calls()[len(e.router.calls())-1]
	if last.from.AgentID != "" || last.from.SessionID == "" {
		// owner has several agents and none named "owner": no single sender.
		t.Fatalf("sender %+v", last.from)
	}
	cl.must("map/send", `{"to":{"agent":"child"}}`)
	last = e.router.calls()[len(e.router.calls())-1]
	if last.from.ParticipantType != TypeClient || last.from.AgentID != "" {
		t.Fatalf("client sender %+v", last.from)
	}
	solo := e.dial()
	connectAs(solo, TypeAgent, map[string]any{"participantId": "solo-p"})
	solo.must("map/agents/register", `{"agentId":"solo"}`)
	solo.must("map/send", `{"to":{"agent":"child"}}`)
	if last = e.router.calls()[len(e.router.calls())-1]; last.from.AgentID != "solo" {
		t.Fatalf("single-agent sender %+v", last.from)
	}
}

func TestTranslate(t *testing.T) {
	var re *rpc.Error
	err := translate(&registry.Error{Code: registry.CodeInvalidParams, Field: "x", Message: "bad"})
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || re.Data.Details["field"] != "x" {
		t.Fatalf("%v", err)
	}
	if err := translate(fmt.Errorf("wrap: %w", &registry.Error{Code: 2001, Message: "m"})); !rpc.IsCode(err, 2001) {
		t.Fatalf("%v", err)
	}
	if asRPCError(errors.New("secret")).Code != rpc.CodeInternal {
		t.Fatal("plain error not internal")
	}
}

// On a follower the pre-check is skipped (its replica may lag): the FSM
// refuses with the same code and leaves the state unchanged.
func TestAgents_FollowerRefusalIsCommittedNoop(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IsLeader = func() bool { return false } })
	ag := e.dial()
	connectAs(ag, TypeAgent, map[string]any{"participantId": "p1"})
	ag.must("map/agents/register", `{"agentId":"a1"}`)
	other := e.dial()
	connectAs(other, TypeAgent, map[string]any{"participantId": "p2"})
	before, agents := e.store.AppliedIndex(), len(e.reg.Agents())
	other.fails("map/agents/register", `{"agentId":"a1"}`, rpc.CodeAgentExists)
	if e.store.AppliedIndex() == before || len(e.reg.Agents()) != agents {
		t.Fatalf("index %d -> %d, agents %d -> %d", before, e.store.AppliedIndex(), agents, len(e.reg.Agents()))
	}
	if a, _ := e.reg.Agent("a1"); a.OwnerID != "p1" {
		t.Fatalf("agent changed owner: %+v", a)
	}
}
