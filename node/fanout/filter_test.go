package fanout

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

func TestFilter_Match(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addAgent(registry.Agent{ID: "a1", Role: "worker", Scopes: []string{"team"},
		Metadata: json.RawMessage(`{"tier":"gold","cfg":{"zone":"eu"},"n":3}`), Environment: json.RawMessage(`{"os":{"type":"linux"}}`)})
	reg.addAgent(registry.Agent{ID: "a2", Role: "lead"})
	ev := func(typ string, agents []string, scopes []string, data string) *prepared {
		return prepare(registry.Event{ID: "E", Type: typ, Timestamp: 1, Source: "p-1", AgentIDs: agents, ScopeIDs: scopes, Data: json.RawMessage(data)}, false)
	}
	stateA1 := ev("agent_state_changed", []string{"a1"}, nil, `{"agentId":"a1"}`)
	regA2 := ev("agent_registered", []string{"a2"}, nil, `{"agent":{"id":"a2"}}`)
	msgUrgent := ev("message_sent", []string{"a2", "a1"}, []string{"room"}, `{"priority":"urgent","correlationId":"c-1","payload":1}`)
	goneAgent := ev("agent_unregistered", []string{"ghost"}, nil, `{"agentId":"ghost","agent":{"id":"ghost","role":"worker","metadata":{"tier":"gold"}}}`)
	mailEv := ev("mail.created", nil, nil, `{}`)

	cases := []struct {
		name   string
		filter string
		ev     *prepared
		want   bool
	}{
		{"empty filter matches all", `{}`, stateA1, true},
		{"absent filter", ``, mailEv, true},
		{"type exact snake", `{"eventTypes":["agent_state_changed"]}`, stateA1, true},
		{"type dotted alias", `{"eventTypes":["agent.state.changed"]}`, stateA1, true},
		{"type dotted alias registered", `{"eventTypes":["agent.registered"]}`, regA2, true},
		{"type mismatch", `{"eventTypes":["agent_registered"]}`, stateA1, false},
		{"type OR within", `{"eventTypes":["scope_created","agent_registered"]}`, regA2, true},
		{"type wildcard dotted", `{"eventTypes":["agent.*"]}`, stateA1, true},
		{"type wildcard snake", `{"eventTypes":["message_*"]}`, msgUrgent, true},
		{"type wildcard no match", `{"eventTypes":["scope.*"]}`, stateA1, false},
		{"type star", `{"eventTypes":["*"]}`, mailEv, true},
		{"type ext dotted", `{"eventTypes":["mail.created"]}`, mailEv, true},
		{"type ext wildcard", `{"eventTypes":["mail.*"]}`, mailEv, true},
		{"empty list matches all", `{"eventTypes":[]}`, stateA1, true},
		{"agents", `{"agents":["a1"]}`, stateA1, true},
		{"agents no", `{"agents":["a2"]}`, stateA1, false},
		{"fromAgents alias", `{"fromAgents":["a2"]}`, regA2, true},
		{"agents source", `{"agents":["p-1"]}`, regA2, true},
		{"agents glob", `{"agents":["a*"]}`, stateA1, true},
		{"agents glob no", `{"agents":["b*"]}`, stateA1, false},
		{"roles", `{"roles":["worker"]}`, stateA1, true},
		{"fromRoles alias", `{"fromRoles":["lead"]}`, regA2, true},
		{"roles no", `{"roles":["lead"]}`, stateA1, false},
		{"roles of gone agent from data", `{"roles":["worker"]}`, goneAgent, true},
		{"scopes via agent", `{"scopes":["team"]}`, stateA1, true},
		{"scopes via event", `{"scopes":["room"]}`, msgUrgent, true},
		{"scopes no", `{"scopes":["other"]}`, regA2, false},
		{"priorities message", `{"priorities":["urgent","high"]}`, msgUrgent, true},
		{"priorities no", `{"priorities":["low"]}`, msgUrgent, false},
		{"priorities non-message is normal", `{"priorities":["normal"]}`, stateA1, true},
		{"priorities non-message excluded", `{"priorities":["urgent"]}`, stateA1, false},
		{"correlationIds", `{"correlationIds":["c-1"]}`, msgUrgent, true},
		{"correlationIds none on event", `{"correlationIds":["c-1"]}`, stateA1, false},
		{"metadataMatch", `{"metadataMatch":{"tier":"gold","n":3}}`, stateA1, true},
		{"metadataMatch dotted", `{"metadataMatch":{"cfg.zone":"eu"}}`, stateA1, true},
		{"metadataMatch all pairs", `{"metadataMatch":{"tier":"gold","n":4}}`, stateA1, false},
		{"metadataMatch no metadata", `{"metadataMatch":{"tier":"gold"}}`, regA2, false},
		{"metadataMatch gone agent", `{"metadataMatch":{"tier":"gold"}}`, goneAgent, true},
		{"environmentMatch dotted", `{"environmentMatch":{"os.type":"linux"}}`, stateA1, true},
		{"environmentMatch no", `{"environmentMatch":{"os.type":"darwin"}}`, stateA1, false},
		{"AND across fields", `{"eventTypes":["agent_state_changed"],"roles":["worker"],"agents":["a1"]}`, stateA1, true},
		{"AND one field fails", `{"eventTypes":["agent_state_changed"],"roles":["lead"]}`, stateA1, false},
		{"AND message fields", `{"eventTypes":["message.sent"],"priorities":["urgent"],"correlationIds":["c-1"],"scopes":["room"]}`, msgUrgent, true},
		{"mail accepted, not applied", `{"mail":{"conversationId":"x"}}`, stateA1, true},
		{"nulls read as absent", `{"agents":null,"eventTypes":null}`, stateA1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFilter(json.RawMessage(tc.filter))
			if err != nil {
				t.Fatal(err)
			}
			tc.ev.info = nil // info depends on nothing but the registry; recompute per case
			if got := f.match(tc.ev, reg); got != tc.want {
				t.Errorf("match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseFilter_Invalid(t *testing.T) {
	cases := []struct{ filter, field string }{
		{`[]`, "filter"},
		{`"x"`, "filter"},
		{`{"eventType":["x"]}`, "filter.eventType"},
		{`{"agents":"a1"}`, "filter.agents"},
		{`{"agents":[1]}`, "filter.agents"},
		{`{"roles":[""]}`, "filter.roles[0]"},
		{`{"priorities":["asap"]}`, "filter.priorities[0]"},
		{`{"metadataMatch":[1]}`, "filter.metadataMatch"},
		{`{"environmentMatch":"x"}`, "filter.environmentMatch"},
		{`{"mail":5}`, "filter.mail"},
	}
	for _, tc := range cases {
		_, err := parseFilter(json.RawMessage(tc.filter))
		var e *rpc.Error
		if !errors.As(err, &e) || e.Code != rpc.CodeInvalidParams || e.Data.Details["field"] != tc.field {
			t.Errorf("parseFilter(%s) = %v, want -32602 on %s", tc.filter, err, tc.field)
		}
	}
}

func TestBodyFor_StripsMessagePayload(t *testing.T) {
	p := prepare(registry.Event{ID: "E", Type: "message_sent", Timestamp: 5,
		Data: json.RawMessage(`{"messageId":"m","payload":{"secret":1},"to":"a"}`)}, true)
	var with, without struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(p.bodyFor(true), &with); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(p.bodyFor(false), &without); err != nil {
		t.Fatal(err)
	}
	if string(with.Data["payload"]) != `{"secret":1}` {
		t.Errorf("payload missing with includeMessagePayloads: %s", p.bodyFor(true))
	}
	if _, ok := without.Data["payload"]; ok || string(without.Data["messageId"]) != `"m"` {
		t.Errorf("payload not stripped: %s", p.bodyFor(false))
	}
	reg := prepare(registry.Event{ID: "E", Type: "agent_registered", Data: json.RawMessage(`{"payload":1}`)}, false)
	if string(reg.bodyFor(false)) != string(reg.body) {
		t.Error("non-message event altered")
	}
}
