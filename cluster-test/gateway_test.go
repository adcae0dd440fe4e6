package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// gatewayEnvelope is an SDK-form map/federation/route params object.
func gatewayEnvelope(source, target string, hops int, maxHops string, path string, msg string) string {
	fed := fmt.Sprintf(`"sourceSystem":%q,"targetSystem":%q,"hopCount":%d,"originTimestamp":1`, source, target, hops)
	if maxHops != "" {
		fed += `,"maxHops":` + maxHops
	}
	if path != "" {
		fed += `,"path":` + path
	}
	return fmt.Sprintf(`{"systemId":%q,"envelope":{"payload":%s,"federation":{%s}}}`, target, msg, fed)
}

// TestGateway_BadInputChangesNothing: a gateway connected to one node of
// a 3-node system sends bad map/federation/route requests; each gets its
// MAP error, changes no replicated state, binds nothing and delivers
// nothing to the agent on another node. Participants that are not
// gateways, or gave up federation.canFederate, get 1003. A good route
// then delivers (so "nothing delivered" is not vacuous).
func TestGateway_BadInputChangesNothing(t *testing.T) {
	// Envelopes are bounded below the frame limit here, so both limits
	// are seen: 64 KiB of payload and meta per routed message.
	c := New(t, 3, WithSystem("dc1"), WithInsecure(), WithNodeConfig(func(_ int, cfg *node.Config) { cfg.Federation.MaxEnvelopeBytes = 64 << 10 }))
	bob := agentOn(t, c, 2, "bob", nil)
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	key, err := c.Node(0).Server().ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "gw-lab", ParticipantTypes: []string{"gateway"}, GatewaySources: []string{"lab"}, GatewayTargets: []string{"dc1"}})
	if err != nil {
		t.Fatal(err)
	}
	keyAuth := map[string]any{"method": "api-key", "token": key.GetToken()}
	gw := c.Connect(t, 0, map[string]any{"participantType": "gateway", "auth": keyAuth})
	lazy := c.Connect(t, 0, map[string]any{"participantType": "gateway", "auth": keyAuth,
		"capabilities": map[string]any{"federation": map[string]any{"canFederate": false}}})
	agent := c.Connect(t, 1, map[string]any{"participantType": "agent"})
	client := c.Connect(t, 1, map[string]any{"participantType": "client"})

	// Every node has applied the set-up (sessions) before state is compared.
	c.RequireConverged(t)
	msg := `{"id":"m","from":"alice","to":{"agent":"bob"},"payload":{"x":1}}`
	good := gatewayEnvelope("lab", "dc1", 0, "", `["lab"]`, msg)
	for _, tc := range []struct {
		name   string
		caller *Client
		params string
		code   int
		want   string
	}{
		{"malformed envelope", gw, `{"systemId":"dc1","envelope":{"payload":{}}}`, rpc.CodeInvalidParams, "federation (or routing)"},
		{"envelope of the wrong type", gw, `{"systemId":"dc1","envelope":"lab->dc1"}`, rpc.CodeInvalidParams, "must be an object"},
		{"hop count of the wrong type", gw, strings.Replace(good, `"hopCount":0`, `"hopCount":"0"`, 1), rpc.CodeInvalidParams, "hopCount must be an integer"},
		{"recipient of the wrong type", gw, gatewayEnvelope("lab", "dc1", 0, "", "", `{"from":"alice","to":[1]}`), rpc.CodeInvalidParams, "agent or scope address"},
		{"sender claiming another system", gw, gatewayEnvelope("lab", "dc1", 0, "", "", `{"from":"dc1:agent:root","to":"bob"}`), rpc.CodeInvalidParams, "names system dc1"},
		{"payload over the envelope limit", gw, gatewayEnvelope("lab", "dc1", 0, "", "", `{"from":"alice","to":"bob","payload":"`+strings.Repeat("x", 100<<10)+`"}`), rpc.CodeInvalidParams, "more than the limit of 65536"},
		{"request over the frame limit", gw, gatewayEnvelope("lab", "dc1", 0, "", "", `{"from":"alice","to":"bob","payload":"`+strings.Repeat("x", 2<<20)+`"}`), rpc.CodeInvalidRequest, ""},
		{"forged source system", gw, gatewayEnvelope("mallory", "dc1", 0, "", "", msg), rpc.CodeFederationAuthFailed, "does not allow routing for system mallory"},
		{"source is this system", gw, gatewayEnvelope("dc1", "dc1", 0, "", "", msg), rpc.CodeFederationAuthFailed, "cannot route for this system"},
		{"loop", gw, gatewayEnvelope("lab", "dc1", 1, "", `["lab","dc1"]`, msg), rpc.CodeLoopDetected, "already in the envelope's path"},
		{"max hops", gw, gatewayEnvelope("lab", "dc1", 5, "5", "", msg), rpc.CodeMaxHopsExceeded, "Max hops exceeded"},
		{"target not allowed", gw, gatewayEnvelope("lab", "dc9", 0, "", "", msg), rpc.CodeFederationRouteRejected, "does not allow routing to system dc9"},
		{"unknown agent", gw, gatewayEnvelope("lab", "dc1", 0, "", "", `{"from":"alice","to":"nobody"}`), rpc.CodeAgentNotFound, "nobody"},
		{"missing capability", lazy, good, rpc.CodePermissionDenied, "federation.canFederate"},
		{"agent participant", agent, good, rpc.CodePermissionDenied, "participant type agent"},
		{"client participant", client, good, rpc.CodePermissionDenied, "participant type client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := c.Node(0).Server()
			before, _ := Digest(srv.Registry())
			fedBefore := srv.Federation().State().Snapshot()
			_, err := tc.caller.Call("map/federation/route", json.RawMessage(tc.params))
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != tc.code || !strings.Contains(re.Message+fmt.Sprint(re.Data), tc.want) {
				t.Fatalf("got %s, want %d mentioning %q", Describe(err), tc.code, tc.want)
			}
			// Let anything the refusal might have proposed apply, then
			// compare the replicated state.
			if err := c.Node(0).Store().WaitApplied(ctx, c.Node(0).Store().AppliedIndex()); err != nil {
				t.Fatal(err)
			}
			if after, sum := Digest(srv.Registry()); after != before {
				t.Fatalf("refused route changed the registry: %s", sum)
			}
			if fedAfter := srv.Federation().State().Snapshot(); len(fedAfter) != len(fedBefore) {
				t.Fatalf("refused route changed the federation state: %v", fedAfter)
			}
			for _, n := range c.Running() {
				if b, ok := n.Server().Federation().State().Gateway("lab"); ok {
					t.Fatalf("%s: refused route bound lab to %v", n, b)
				}
			}
		})
	}
	if got := bob.Messages(); len(got) != 0 {
		t.Fatalf("refused routes delivered %v", got)
	}
	if _, err := gw.Call("map/federation/route", json.RawMessage(good)); err != nil {
		t.Fatalf("good route: %s", Describe(err))
	}
	got, err := bob.WaitMessages(1, 5*time.Second)
	if err != nil || got[0].From != "lab:agent:alice" {
		t.Fatalf("good route delivered %v (%v)", got, err)
	}
}
