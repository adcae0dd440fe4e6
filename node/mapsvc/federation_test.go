package mapsvc

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/rpc"
)

// gwAuth: "gw" is a gateway credential for system lab; none is anonymous
// agents and clients.
type gwAuth struct{}

func (gwAuth) Methods() []string { return []string{AuthAPIKey, AuthNone} }
func (gwAuth) Authenticate(_ context.Context, method, cred string) (*Principal, error) {
	switch {
	case method == AuthNone:
		return &Principal{ID: "anonymous", Method: AuthNone, Types: []string{TypeAgent, TypeClient}}, nil
	case method == AuthAPIKey && cred == "gw":
		return &Principal{ID: "key:gw", Method: method, ParticipantIDPattern: "gw-lab", Types: []string{TypeGateway},
			GatewaySources: []string{"lab"}, GatewayTargets: []string{"*"}}, nil
	case method == AuthAPIKey && cred == "sys":
		return &Principal{ID: "key:sys", Method: method, ParticipantIDPattern: "*", Types: []string{TypeSystem}}, nil
	}
	return nil, rpc.NewError(rpc.CodeAuthFailed, "Invalid credentials")
}

// fakeGateway records what the federation methods hand on.
type fakeGateway struct {
	mu    sync.Mutex
	calls []string
	seen  []federation.GatewayCaller
}

func (g *fakeGateway) rec(method string, c federation.GatewayCaller) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls, g.seen = append(g.calls, method), append(g.seen, c)
}

func (g *fakeGateway) Connect(_ context.Context, c federation.GatewayCaller, _ json.RawMessage) (any, error) {
	g.rec("connect", c)
	return map[string]any{"connected": true}, nil
}

func (g *fakeGateway) Route(_ context.Context, c federation.GatewayCaller, _ json.RawMessage) (any, error) {
	g.rec("route", c)
	return map[string]any{"routed": true}, nil
}

func (g *fakeGateway) snapshot() ([]string, []federation.GatewayCaller) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls), slices.Clone(g.seen)
}

// TestFederationMethods_Gating: only gateway (and system) participants
// with federation.canFederate reach the gateway; everyone else gets 1003
// and nothing reaches it or the log.
func TestFederationMethods_Gating(t *testing.T) {
	gw := &fakeGateway{}
	e := newEnv(t, func(c *Config) { c.Authenticator = gwAuth{}; c.Gateway = gw })
	key := func(cred string) map[string]any { return map[string]any{"method": "api-key", "token": cred} }
	route := `{"systemId":"dev","envelope":{}}`
	for _, tc := range []struct {
		name    string
		connect map[string]any
	}{
		{"agent participant", map[string]any{}},
		{"client participant", map[string]any{"participantType": TypeClient}},
		{"gateway without the federation capability", map[string]any{"participantType": TypeGateway, "auth": key("gw"),
			"capabilities": map[string]any{"federation": map[string]any{"canFederate": false}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.dial()
			p := map[string]any{"protocolVersion": 1, "participantType": TypeAgent}
			for k, v := range tc.connect {
				p[k] = v
			}
			c.must("map/connect", p)
			e.refused(c, "map/federation/route", route, rpc.CodePermissionDenied)
			e.refused(c, "map/federation/connect", `{"systemId":"dc2","endpoint":"x"}`, rpc.CodePermissionDenied)
		})
	}
	if calls, _ := gw.snapshot(); len(calls) != 0 {
		t.Fatalf("refused callers reached the gateway: %v", calls)
	}
	// A gateway participant needs a credential that allows the type.
	e.dial().fails("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeGateway}, rpc.CodePermissionDenied)

	c := e.dial()
	res := c.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeGateway, "auth": key("gw")})
	if fed := res["capabilities"].(map[string]any)["federation"].(map[string]any); fed["canFederate"] != true {
		t.Fatalf("gateway capabilities %v", res["capabilities"])
	}
	c.must("map/federation/connect", `{"systemId":"dc2","endpoint":"x"}`)
	c.must("map/federation/route", route)
	sys := e.dial()
	sys.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeSystem, "auth": key("sys")})
	sys.must("map/federation/route", route)
	calls, seen := gw.snapshot()
	if !slices.Equal(calls, []string{"connect", "route", "route"}) {
		t.Fatalf("gateway calls %v", calls)
	}
	if g := seen[0]; g.SessionID != res["sessionId"] || g.ParticipantID != "gw-lab" || !slices.Equal(g.Sources, []string{"lab"}) || !slices.Equal(g.Targets, []string{"*"}) {
		t.Fatalf("caller %+v", g)
	}
	if s := seen[2]; len(s.Sources) != 0 || len(s.Targets) != 0 {
		t.Fatalf("a system credential without allowlists passed %+v", s)
	}
}

func TestFederationMethods_NotMountedWithoutGateway(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	connectAs(c, TypeGateway, nil)
	c.fails("map/federation/route", `{}`, rpc.CodeMethodNotFound)
}
