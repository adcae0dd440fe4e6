package node_test

import (
	"fmt"
	"strings"
	"testing"
)

// paramProbe is one field of one method given a value of the wrong type
// (or out of range): -32602 naming the field, and nothing changes.
type paramProbe struct {
	method, params string
	preConnect     bool
}

// paramProbes covers the params of every core method (map-protocol.md
// §4.1) and of the SDK methods Concord serves (§4.4).
func paramProbes() []paramProbe {
	wrong := map[string][]string{
		"map/disconnect":        {`{"reason":5}`},
		"map/auth/refresh":      {`{"refreshToken":5}`, `{"credential":[]}`},
		"map/send":              {`{"to":5,"payload":1}`, `{"to":[],"payload":1}`, `{"to":"x","meta":"m"}`, `{"to":{"agents":[]},"payload":1}`, `{"to":{"agents":"a"}}`},
		"map/subscribe":         {`{"filter":"all"}`, `{"options":1}`, `{"replayFrom":true}`, `{"filter":{"eventTypes":"agent_registered"}}`},
		"map/unsubscribe":       {`{"subscriptionId":5}`, `{}`},
		"map/replay":            {`{"afterEventId":5}`, `{"limit":"10"}`, `{"limit":-1}`},
		"map/agents/list":       {`{"filter":"x"}`, `{"limit":"10"}`, `{"limit":0}`, `{"limit":1.5}`, `{"cursor":5}`, `{"filter":{"states":"idle"}}`},
		"map/agents/get":        {`{"agentId":5}`, `{}`, `{"agentId":"a","include":"all"}`},
		"map/agents/register":   {`{"agentId":5}`, `{"name":5}`, `{"role":[]}`, `{"parent":5}`, `{"scopes":"s"}`, `{"visibility":5}`, `{"capabilities":"x"}`, `{"metadata":"x"}`},
		"map/agents/spawn":      {`{"agentId":5}`, `{"requestedScopes":"s"}`, `{"ttlMinutes":"1"}`, `{"ttlMinutes":0}`, `{"initialMessage":"hi"}`},
		"map/agents/unregister": {`{"agentId":5}`, `{}`, `{"agentId":"a","reason":5}`},
		"map/agents/update":     {`{"agentId":5}`, `{}`, `{"agentId":"a","state":5}`, `{"agentId":"a","metadata":"x"}`},
		"map/agents/stop":       {`{"agentId":5}`, `{}`, `{"agentId":"a","force":"yes"}`},
		"map/agents/suspend":    {`{"agentId":5}`, `{}`},
		"map/agents/resume":     {`{"agentId":5}`, `{}`},
		"map/structure/graph":   {`{"rootAgentId":5}`, `{"depth":"2"}`, `{"depth":0}`, `{"includeRelationships":"yes"}`},
		"map/scopes/list":       {`{"parent":5}`},
		"map/scopes/get":        {`{"scopeId":5}`, `{}`},
		"map/scopes/create":     {`{"scopeId":5}`, `{"name":5}`, `{"joinPolicy":5}`, `{"joinPolicy":"whoever"}`, `{"persistent":"yes"}`, `{"metadata":"x"}`},
		"map/scopes/delete":     {`{"scopeId":5}`, `{}`},
		"map/scopes/join":       {`{"scopeId":5,"agentId":"a"}`, `{"scopeId":"s","agentId":5}`, `{"scopeId":"s"}`},
		"map/scopes/leave":      {`{"scopeId":5,"agentId":"a"}`, `{"scopeId":"s","agentId":5}`},
		"map/scopes/members":    {`{"scopeId":5}`, `{"scopeId":"s","limit":"5"}`},
		// The runs extension (x-concord/runs/*, node/runs/PROTOCOL.md).
		"x-concord/runs/start":  {`{}`, `{"request":"debate"}`, `{"request":[1]}`},
		"x-concord/runs/get":    {`{}`, `{"runId":5}`, `{"runId":"r","include":"all"}`, `{"runId":"r","include":["everything"]}`},
		"x-concord/runs/cancel": {`{}`, `{"runId":5}`},
	}
	var out []paramProbe
	for m, list := range wrong {
		for _, p := range list {
			out = append(out, paramProbe{method: m, params: p})
		}
	}
	for _, p := range []string{
		`{"protocolVersion":"1","participantType":"agent"}`,
		`{"protocolVersion":1.5,"participantType":"agent"}`,
		`{"protocolVersion":1}`,
		`{"protocolVersion":1,"participantType":5}`,
		`{"protocolVersion":1,"participantType":"agent","participantId":5}`,
		`{"protocolVersion":1,"participantType":"agent","name":5}`,
		`{"protocolVersion":1,"participantType":"agent","capabilities":"all"}`,
		`{"protocolVersion":1,"participantType":"agent","sessionId":5}`,
		`{"protocolVersion":1,"participantType":"agent","auth":"none"}`,
		`{"protocolVersion":1,"participantType":"agent","auth":{"method":5}}`,
		`{"protocolVersion":1,"participantType":"agent","reclaimAgents":"a"}`,
		`{"protocolVersion":1,"participantType":"agent","disconnectPolicy":"orphan"}`,
		`{"protocolVersion":1,"participantType":"agent","disconnectPolicy":{"agentBehavior":"vanish"}}`,
		`{"protocolVersion":1,"participantType":"agent","resumeToken":5}`,
	} {
		out = append(out, paramProbe{method: "map/connect", params: p, preConnect: true})
	}
	return out
}

// TestProbe_WrongParamTypes gives every method wrong-typed params on one
// agent session: each gets -32602 (the field named in details), the
// session keeps working and nothing is written.
func TestProbe_WrongParamTypes(t *testing.T) {
	srv := startProbeNode(t, nil)
	agent := dialProbe(t, srv)
	agent.connectAgent()
	for i, p := range paramProbes() {
		t.Run(fmt.Sprintf("%s %s", p.method, p.params), func(t *testing.T) {
			ws := agent
			if p.preConnect {
				ws = dialProbe(t, srv)
			}
			before := markState(srv)
			id := fmt.Sprintf(`"p%d"`, i)
			ws.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, p.method, p.params))
			got := ws.collectUntilSentinel(1)
			if len(got) != 1 {
				t.Fatalf("want one reply, got %q", got)
			}
			checkError(t, got[0], wantErr{code: -32602, id: id, category: "protocol"})
			if !strings.Contains(string(got[0]), `"field"`) && !strings.Contains(string(got[0]), `"reason"`) {
				t.Errorf("-32602 without details naming what is wrong: %s", got[0])
			}
			checkUnchanged(t, srv, before)
			if p.preConnect {
				ws.connectAgent()
			}
			ws.mustCall("map/agents/list", map[string]any{})
		})
	}
}
