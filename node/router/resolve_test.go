package router

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// world is the fixture for address resolution: a small hierarchy
//
//	boss ── mgr ─┬─ w1 ── w3
//	             └─ w2
//	solo, dup, agent:dup (roots), orphan (no owner), far (homed on n2)
//
// scopes team {mgr, w1, w2}, quiet {w2} (sendPolicy members), empty {}.
func world() (*fakeRegistry, map[string]*fakeConn) {
	reg := &fakeRegistry{}
	conns := map[string]*fakeConn{}
	add := func(id, parent, role, home string, scopes ...string) {
		a := registry.Agent{ID: id, Parent: parent, Role: role, Scopes: scopes, State: "active",
			OwnerID: "p-" + id, SessionID: "s-" + id, HomeNode: home}
		reg.agents = append(reg.agents, a)
		reg.sessions = append(reg.sessions, registry.Session{ID: "s-" + id, ParticipantID: "p-" + id,
			ParticipantType: "agent", HomeNode: home, Connected: true})
		if home == "n1" {
			conns["s-"+id] = &fakeConn{}
		}
	}
	add("boss", "", "lead", "n1")
	add("mgr", "boss", "manager", "n1", "team")
	add("w1", "mgr", "worker", "n1", "team")
	add("w2", "mgr", "worker", "n1", "team", "quiet")
	add("w3", "w1", "worker", "n1")
	add("solo", "", "worker", "n1")
	add("dup", "", "", "n1")
	add("agent:dup", "", "", "n1")
	add("far", "", "remote", "n2")
	reg.agents = append(reg.agents, registry.Agent{ID: "orphan", Role: "ghost", State: "active"})
	reg.scopes = []registry.Scope{
		{ID: "team", Members: []string{"mgr", "w1", "w2"}},
		{ID: "quiet", SendPolicy: "members", Members: []string{"w2"}},
		{ID: "empty"},
	}
	for _, c := range []struct{ id, p string }{{"s-client", "p-client"}, {"s-client2", "p-client2"}} {
		reg.sessions = append(reg.sessions, registry.Session{ID: c.id, ParticipantID: c.p,
			ParticipantType: "client", HomeNode: "n1", Connected: true})
		conns[c.id] = &fakeConn{}
	}
	reg.sessions = append(reg.sessions, registry.Session{ID: "s-gone", ParticipantID: "p-gone", ParticipantType: "client"})
	return reg, conns
}

func agentSender(id string) Sender {
	return Sender{SessionID: "s-" + id, ParticipantID: "p-" + id, ParticipantType: "agent", AgentID: id}
}

var clientSender = Sender{SessionID: "s-client", ParticipantID: "p-client", ParticipantType: "client"}

func TestSend_AddressResolution(t *testing.T) {
	const w1 = "w1"
	allAgentSessionsButW1 := []string{"p-boss", "p-mgr", "p-w2", "p-w3", "p-solo", "p-dup", "p-agent:dup"}
	cases := []struct {
		name      string
		from      Sender
		to        string
		delivered []string
		failed    []FailedRecipient
		code      int
	}{
		{"string id", agentSender(w1), `"w2"`, []string{"w2"}, nil, 0},
		{"string agent prefix", agentSender(w1), `"agent:w2"`, []string{"w2"}, nil, 0},
		{"string scope prefix", agentSender(w1), `"scope:team"`, []string{"mgr", "w2"}, nil, 0},
		{"string unknown", agentSender(w1), `"nope"`, nil, nil, rpc.CodeAgentNotFound},
		{"string ambiguous", agentSender(w1), `"agent:dup"`, nil, nil, rpc.CodeAddressAmbiguous},
		{"string federated", agentSender(w1), `"other:agent:a"`, nil, nil, rpc.CodeFederationSystemNotFound},
		{"agent", agentSender(w1), `{"agent":"w2"}`, []string{"w2"}, nil, 0},
		{"agent unknown", agentSender(w1), `{"agent":"nope"}`, nil, nil, rpc.CodeAgentNotFound},
		{"agent orphaned", agentSender(w1), `{"agent":"orphan"}`, nil, nil, rpc.CodeDeliveryFailed},
		{"agent remote without relay", agentSender(w1), `{"agent":"far"}`, nil, nil, rpc.CodeDeliveryFailed},
		{"agents dedup", agentSender(w1), `{"agents":["w2","boss","w2"]}`, []string{"w2", "boss"}, nil, 0},
		{"agents partial", agentSender(w1), `{"agents":["w2","nope"]}`, []string{"w2"},
			[]FailedRecipient{{"nope", reasonAgentNotFound}}, 0},
		{"agents none exist", agentSender(w1), `{"agents":["nope"]}`, nil, nil, rpc.CodeAgentNotFound},
		{"scope excludes sender", agentSender(w1), `{"scope":"team"}`, []string{"mgr", "w2"}, nil, 0},
		{"scope unknown", agentSender(w1), `{"scope":"nope"}`, nil, nil, rpc.CodeScopeNotFound},
		{"scope sendPolicy members denies non-member", agentSender(w1), `{"scope":"quiet"}`, nil, nil, rpc.CodePermissionDenied},
		{"scope sendPolicy members denies client", clientSender, `{"scope":"quiet"}`, nil, nil, rpc.CodePermissionDenied},
		{"scope only sender", agentSender("w2"), `{"scope":"quiet"}`, []string{}, nil, 0},
		{"scope empty", agentSender(w1), `{"scope":"empty"}`, []string{}, nil, 0},
		{"role", agentSender(w1), `{"role":"worker"}`, []string{"solo", "w2", "w3"}, nil, 0},
		{"role within", agentSender(w1), `{"role":"worker","within":"team"}`, []string{"w2"}, nil, 0},
		{"role within null", agentSender(w1), `{"role":"manager","within":null}`, []string{"mgr"}, nil, 0},
		{"role within unknown", agentSender(w1), `{"role":"worker","within":"nope"}`, nil, nil, rpc.CodeScopeNotFound},
		{"role nobody", agentSender(w1), `{"role":"nobody"}`, []string{}, nil, 0},
		{"parent", agentSender(w1), `{"parent":true}`, []string{"mgr"}, nil, 0},
		{"parent of root", agentSender("boss"), `{"parent":true}`, []string{}, nil, 0},
		{"parent from client", clientSender, `{"parent":true}`, nil, nil, rpc.CodeAddressNotFound},
		{"children", agentSender("mgr"), `{"children":true}`, []string{"w1", "w2"}, nil, 0},
		{"children none", agentSender("w2"), `{"children":true}`, []string{}, nil, 0},
		{"ancestors", agentSender("w3"), `{"ancestors":true}`, []string{"w1", "mgr", "boss"}, nil, 0},
		{"ancestors depth", agentSender("w3"), `{"ancestors":true,"depth":2}`, []string{"w1", "mgr"}, nil, 0},
		{"descendants", agentSender("boss"), `{"descendants":true}`, []string{"mgr", "w1", "w2", "w3"}, nil, 0},
		{"descendants depth", agentSender("boss"), `{"descendants":true,"depth":2}`, []string{"mgr", "w1", "w2"}, nil, 0},
		{"siblings", agentSender(w1), `{"siblings":true}`, []string{"w2"}, nil, 0},
		{"siblings of root", agentSender("boss"), `{"siblings":true}`, []string{}, nil, 0},
		{"broadcast", agentSender(w1), `{"broadcast":true}`,
			[]string{"agent:dup", "boss", "dup", "mgr", "solo", "w2", "w3"},
			[]FailedRecipient{{"far", reasonNoRelay}, {"orphan", reasonOrphaned}}, 0},
		{"system", agentSender(w1), `{"system":true}`, []string{}, nil, 0},
		{"federated", agentSender(w1), `{"system":"other","agent":"a"}`, nil, nil, rpc.CodeFederationSystemNotFound},
		{"participant client", agentSender(w1), `{"participant":"p-client"}`, []string{"p-client"}, nil, 0},
		{"participant agent id", clientSender, `{"participant":"w2"}`, []string{"w2"}, nil, 0},
		{"participant unknown", agentSender(w1), `{"participant":"nobody"}`, nil, nil, rpc.CodeAddressNotFound},
		{"participants clients", agentSender(w1), `{"participants":"clients"}`, []string{"p-client", "p-client2"},
			[]FailedRecipient{{"p-gone", reasonNotConnected}}, 0},
		{"participants agents", agentSender(w1), `{"participants":"agents"}`, allAgentSessionsButW1,
			[]FailedRecipient{{"p-far", reasonNoRelay}}, 0},
		{"participants all", clientSender, `{"participants":"all"}`,
			[]string{"p-boss", "p-mgr", "p-w1", "p-w2", "p-w3", "p-solo", "p-dup", "p-agent:dup", "p-client2"},
			[]FailedRecipient{{"p-far", reasonNoRelay}, {"p-gone", reasonNotConnected}}, 0},
		{"two forms", agentSender(w1), `{"agent":"w2","scope":"team"}`, nil, nil, rpc.CodeAddressAmbiguous},
		{"two relative forms", agentSender(w1), `{"parent":true,"children":true}`, nil, nil, rpc.CodeAddressAmbiguous},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg, conns := world()
			r := testRouter(t, reg, conns, nil, nil)
			res, err := r.Send(context.Background(), tc.from, json.RawMessage(`{"to":`+tc.to+`,"payload":{"n":1}}`))
			if tc.code != 0 {
				if code := errCode(err); code != tc.code {
					t.Fatalf("error code = %d (%v), want %d", code, err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			sr := res.(*SendResult)
			if !slices.Equal(sr.Delivered, tc.delivered) {
				t.Errorf("delivered = %q, want %q", sr.Delivered, tc.delivered)
			}
			if !slices.Equal(sr.Failed, tc.failed) {
				t.Errorf("failed = %v, want %v", sr.Failed, tc.failed)
			}
		})
	}
}

func errCode(err error) int {
	var e *rpc.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
