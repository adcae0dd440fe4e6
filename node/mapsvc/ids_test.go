package mapsvc

import (
	"strings"
	"testing"

	"github.com/concordmap/concord/node/rpc"
)

// TestIDs_LengthAndCharacters: ids over MaxIDLength or with control
// characters are refused with -32602 naming the field, and write nothing.
func TestIDs_LengthAndCharacters(t *testing.T) {
	e, ag, _ := agentEnv(t)
	long := strings.Repeat("a", MaxIDLength+1)
	ok := strings.Repeat("a", MaxIDLength)
	cases := []struct {
		method, params, field string
	}{
		{"map/agents/register", `{"agentId":"` + long + `"}`, "agentId"},
		{"map/agents/register", `{"agentId":"a\u0000b"}`, "agentId"},
		{"map/agents/register", `{"agentId":"a\nb"}`, "agentId"},
		{"map/agents/register", `{"agentId":"x","parent":"p\r"}`, "parent"},
		{"map/agents/register", `{"agentId":"x","scopes":["ok","` + long + `"]}`, "scopes"},
		{"map/agents/update", `{"agentId":"` + long + `"}`, "agentId"},
		{"map/agents/unregister", `{"agentId":"\u2028"}`, "agentId"},
		{"map/agents/get", `{"agentId":"` + long + `"}`, "agentId"},
		{"map/scopes/create", `{"scopeId":"` + long + `"}`, "scopeId"},
		{"map/scopes/create", `{"scopeId":"s\u001b[31m"}`, "scopeId"},
		{"map/scopes/join", `{"scopeId":"s","agentId":"a\u0000"}`, "agentId"},
		{"map/agents/register", `{"agentId":"a\ud800"}`, "agentId"},              // lone surrogate: decodes to U+FFFD
		{"map/scopes/create", `{"scopeId":"s\udc00x"}`, "scopeId"},               // another
		{"map/agents/register", `{"agentId":"x","scopes":["\ud83d"]}`, "scopes"}, // half an emoji
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.field, func(t *testing.T) {
			ag.t = t
			e.refused(ag, tc.method, tc.params, rpc.CodeInvalidParams, tc.field)
		})
	}
	ag.t = t
	ag.must("map/agents/register", `{"agentId":"`+ok+`"}`)
	ag.must("map/scopes/create", `{"scopeId":"team one/ü"}`)

	c := e.dial()
	c.fails("map/connect", `{"protocolVersion":1,"participantType":"agent","participantId":"`+long+`"}`, rpc.CodeInvalidParams, "participantId")
	c.fails("map/connect", `{"protocolVersion":1,"participantType":"agent","sessionId":"s\n"}`, rpc.CodeInvalidParams, "sessionId")
}

// TestAgents_UnknownAgentIs2001: acting on an agent that does not exist
// answers 2001 for every caller, also those the method would refuse.
func TestAgents_UnknownAgentIs2001(t *testing.T) {
	e, ag, cl := agentEnv(t)
	gw := e.dial()
	connectAs(gw, TypeGateway, nil)
	noUnreg := e.dial()
	connectAs(noUnreg, TypeAgent, map[string]any{"participantId": "nu",
		"capabilities": map[string]any{"lifecycle": map[string]any{"canUnregister": false, "canStop": false}}})
	for _, c := range []*client{ag, cl, gw, noUnreg} {
		for _, m := range []string{"map/agents/update", "map/agents/unregister", "map/agents/stop", "map/agents/suspend", "map/agents/resume"} {
			e.refused(c, m, `{"agentId":"ghost"}`, rpc.CodeAgentNotFound)
		}
	}
	ag.must("map/agents/register", `{"agentId":"real"}`)
	e.refused(cl, "map/agents/update", `{"agentId":"real"}`, rpc.CodePermissionDenied)
	e.refused(noUnreg, "map/agents/unregister", `{"agentId":"real"}`, rpc.CodePermissionDenied)
}
