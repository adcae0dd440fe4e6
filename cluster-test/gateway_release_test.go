package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// readHTTP returns the body of GET http://addr+path.
func readHTTP(ctx context.Context, addr, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestGateway_BindingShownThenReleased: once a gateway routes for lab,
// every node shows the binding (GET /v1/federation/links, metrics) and a
// reply to lab reaches the gateway; when the gateway's session ends the
// binding goes on every node and a send to lab answers 5001 (not the
// retryable 5000 it would get forever while the binding stayed).
func TestGateway_BindingShownThenReleased(t *testing.T) {
	c := New(t, 3, WithSystem("dc1"), WithInsecure())
	bob := agentOn(t, c, 2, "bob", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := c.Node(0).Server().ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "gw-lab", ParticipantTypes: []string{"gateway"}, GatewaySources: []string{"lab"}, GatewayTargets: []string{"dc1"}})
	if err != nil {
		t.Fatal(err)
	}
	gw := c.Connect(t, 0, map[string]any{"participantType": "gateway", "participantId": "gw-lab",
		"auth": map[string]any{"method": "api-key", "token": key.GetToken()}})
	msg := `{"id":"m","from":"alice","to":{"agent":"bob"},"payload":{"x":1}}`
	if _, err := gw.Call("map/federation/route", json.RawMessage(gatewayEnvelope("lab", "dc1", 0, "", `["lab"]`, msg))); err != nil {
		t.Fatalf("route: %s", Describe(err))
	}
	if _, err := bob.WaitMessages(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	session := gw.Session().SessionID

	Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Running() {
			body, err := readHTTP(ctx, n.HTTPAddr, "/v1/federation/links")
			if err != nil {
				return err
			}
			if want := `"gateways":[{"systemId":"lab","sessionId":"` + session + `","participantId":"gw-lab"`; !strings.Contains(body, want) {
				return fmt.Errorf("%s: links %s lack %s", n, body, want)
			}
		}
		return nil
	})
	metrics, err := readHTTP(ctx, c.Node(0).HTTPAddr, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`concord_federation_gateway_bound{peer="lab",session_id="` + session + `"} 1`,
		"concord_federation_gateway_routed_in_total 1"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
	if _, err := bob.Send(map[string]any{"to": "lab:agent:alice", "payload": "reply"}); err != nil {
		t.Fatalf("reply through the gateway: %s", Describe(err))
	}
	if _, err := gw.WaitMessages(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	if _, err := gw.Call("map/disconnect", map[string]any{}); err != nil {
		t.Fatalf("disconnect: %s", Describe(err))
	}
	gw.Close()
	Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Running() {
			if b, ok := n.Server().Federation().State().Gateway("lab"); ok {
				return fmt.Errorf("%s: lab still bound to %v", n, b)
			}
		}
		_, err := bob.Send(map[string]any{"to": "lab:agent:alice", "payload": "late"})
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeFederationSystemNotFound {
			return fmt.Errorf("send to lab: %s, want 5001", Describe(err))
		}
		return nil
	})
}
