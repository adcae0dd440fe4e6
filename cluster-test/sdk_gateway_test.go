package clustertest

import (
	"context"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestSDKInterop_Gateway runs the official SDK's GatewayConnection,
// unchanged, as the gateway of a foreign MAP system "lab" connected to
// dc1 (2 nodes), which is linked (transitively) to dc2: connectToSystem
// for dc2, dc1 and an unknown system (5001); routeToSystem to an SDK agent
// on dc2 (through dc1) and to one on dc1's other node, whose reply()
// comes back to the gateway; loop (5010), hop-limit (5011) and forged
// source (5002) envelopes built with the SDK's envelope helpers. The
// checks live in sdk/gateway.mjs.
func TestSDKInterop_Gateway(t *testing.T) {
	nodeBin := requireSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	net := NewNetwork(t, nil)
	dc1 := New(t, 2, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 := New(t, 1, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())
	// Transitive both ways: bob's reply to lab:agent:alice leaves dc2 by
	// its link to dc1, which hands it to the gateway serving lab.
	Link(t, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll, Transitive: true})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	Eventually(t, 10*time.Second, func() error { return dc2.LinkUp("dc1") })

	key, err := dc1.Node(0).Server().ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "gw-lab", ParticipantTypes: []string{"gateway"}, Description: "sdk gateway interop",
		GatewaySources: []string{"lab"}, GatewayTargets: []string{"dc1", "dc2"}})
	if err != nil {
		t.Fatalf("create gateway API key: %v", err)
	}
	runSDKScript(ctx, t, nodeBin, "gateway.mjs", nil,
		"GW_URL="+dc1.Node(0).MAPURL(), "AGENT_URL="+dc1.Node(1).MAPURL(), "PEER_URL="+dc2.Node(0).MAPURL(),
		"GW_KEY="+key.GetToken(), "SELF=dc1", "PEER=dc2", "LAB=lab")

	// The binding that brought the replies back is replicated state. The
	// last gateway to route dropped its socket without map/disconnect, so
	// its session may resume and the binding stays (until it expires).
	for _, n := range dc1.Running() {
		if b, ok := n.Server().Federation().State().Gateway("lab"); !ok || b.GetParticipantId() != "gw-lab" {
			t.Fatalf("%s: gateway binding of lab = %v, %v", n, b, ok)
		}
	}
	var routed uint64
	for _, n := range dc1.Running() {
		routed += n.Server().Federation().GatewayStats().RoutedIn
	}
	if routed == 0 {
		t.Fatal("no node counted the gateway's routes")
	}
}
