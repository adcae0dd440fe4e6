package clustertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestFederation_RingOfThree links dc1-dc2-dc3 in a ring of transitive
// links (dc3's link to dc1 allows one hop): a message for a system no one
// links to goes round until it would re-enter a system it crossed
// (5010), or runs out of hops (5011). Then, with dc1-dc3 unlinked, dc1
// reaches dc3 through dc2, with from still naming the source system.
func TestFederation_RingOfThree(t *testing.T) {
	net := NewNetwork(t, nil)
	dc1 := New(t, 3, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 := New(t, 3, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())
	dc3 := New(t, 3, WithSystem("dc3"), WithSharedNetwork(net), WithInsecure())
	Link(t, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll, Transitive: true})
	Link(t, dc2, dc3, LinkSpec{FromExport: exportAll, ToExport: exportAll, Transitive: true})
	Link(t, dc3, dc1, LinkSpec{FromExport: exportAll, ToExport: exportAll, Transitive: true, MaxHops: 1})
	for _, c := range []*Cluster{dc1, dc2, dc3} {
		for _, p := range []string{"dc1", "dc2", "dc3"} {
			if p != c.SystemID() {
				Eventually(t, 10*time.Second, func() error { return c.LinkUp(p) })
			}
		}
	}
	alice := agentOn(t, dc1, 0, "alice", nil)
	carl := agentOn(t, dc3, 2, "carl", nil)

	// dc1 -> dc2 -> dc3 -> back to dc1: a loop.
	_, err := alice.Send(map[string]any{"to": "dz:agent:x", "payload": 1})
	requireMAPError(t, err, rpc.CodeLoopDetected, false)
	// dc3 -> dc1 with a one-hop budget: dc1 may not pass it on.
	_, err = carl.Send(map[string]any{"to": "dz:agent:x", "payload": 1})
	requireMAPError(t, err, rpc.CodeMaxHopsExceeded, false)

	// Direct link first. The dc3 node holding alice's stream may apply
	// carl's registration a moment after carl's node: retry until then.
	Eventually(t, 5*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": "dc3:agent:carl", "payload": "direct"})
		if err != nil || !slices.Equal(res.Delivered, []string{"dc3:agent:carl"}) {
			return fmt.Errorf("direct: %v %s", res, Describe(err))
		}
		return nil
	})
	// Unlink dc1-dc3 (dc3 is told and drops its side): dc1 reaches dc3
	// through dc2.
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	if res, err := dc1.FederationClient(t, 0).Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: "dc3"}); err != nil || !res.GetPeerNotified() {
		t.Fatalf("unlink: %v %v", res, err)
	}
	Eventually(t, 5*time.Second, func() error {
		for _, n := range dc3.Running() {
			if _, ok := n.Server().Federation().State().Link("dc1"); ok {
				return fmt.Errorf("%s still has its link to dc1", n)
			}
		}
		return nil
	})
	Eventually(t, 10*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": map[string]any{"system": "dc3", "agent": "carl"}, "payload": "via dc2"})
		if err != nil {
			return err
		}
		if !slices.Equal(res.Delivered, []string{"dc3:agent:carl"}) {
			return fmt.Errorf("delivered %v", res.Delivered)
		}
		return nil
	})
	msgs, err := carl.WaitMessages(2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	last := msgs[len(msgs)-1]
	if last.From != "dc1:agent:alice" || string(last.Payload) != `"via dc2"` {
		t.Fatalf("transitive message: from %q payload %s", last.From, last.Payload)
	}
}
