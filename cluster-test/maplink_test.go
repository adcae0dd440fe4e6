package clustertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// waitFrom waits until cl has received a message from `from` whose
// payload has field n == want, and returns it.
func waitFrom(t *testing.T, cl *Client, from string, want int, timeout time.Duration) Message {
	t.Helper()
	var got Message
	err := cl.in.wait(timeout, func() error {
		for _, m := range cl.Messages() {
			var p struct{ N int }
			if m.From == from && json.Unmarshal(m.Payload, &p) == nil && p.N == want {
				got = m
				return nil
			}
		}
		return fmt.Errorf("no message n=%d from %s among %d", want, from, len(cl.Messages()))
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// keepArriving has from send to `to` (an address on from's system) until
// one message arrives at rcv (stamped rcvFrom) within half a second of
// its send: the path works again after a fault.
func keepArriving(t *testing.T, from, rcv *Client, to, rcvFrom string, n0 int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := n0; time.Now().Before(deadline); n++ {
		_, _ = from.Send(map[string]any{"to": to, "payload": map[string]any{"n": n}})
		err := rcv.in.wait(500*time.Millisecond, func() error {
			for _, m := range rcv.Messages() {
				var p struct{ N int }
				if m.From == rcvFrom && json.Unmarshal(m.Payload, &p) == nil && p.N == n {
					return nil
				}
			}
			return fmt.Errorf("not yet")
		})
		if err == nil {
			return
		}
	}
	t.Fatalf("messages to %s stopped arriving at %s", to, rcvFrom)
}

// nonHolder returns the index of a running node of c other than holder.
func nonHolder(c *Cluster, holder *Node) int {
	for _, n := range c.Running() {
		if n.ID != holder.ID {
			return n.Index
		}
	}
	return -1
}

// TestMapLink_ConcordAsForeignServer links dc1 (3 nodes) to another
// Concord system's MAP endpoint as a link of kind map (wss, bearer
// token, pinned CA): the foreign agent is imported, messages flow both
// ways with from stamped, the link survives the hard stop of its holder,
// and bad sends get clear errors.
func TestMapLink_ConcordAsForeignServer(t *testing.T) {
	dc1 := New(t, 3, WithSystem("dc1"))
	ext := New(t, 1, WithSystem("ext"))
	bob := agentOn(t, ext, 0, "bob", nil)

	link := dc1.MapLink(t, 0, &concordv1.CreateMapLinkRequest{SystemId: "ext", Url: ext.Node(0).MAPURL(),
		Auth: &concordv1.FedMapAuth{Method: "bearer", Token: ext.Token()}, CaPem: tlstest.CA("ext").CertPEM,
		Export: policy(concordv1.FedPolicyKind_FED_POLICY_KIND_NAME_GLOB, "al*")})
	if link.GetMap().GetAuth().GetToken() != "" {
		t.Fatal("CreateMapLink answered with the token")
	}
	var holder *Node
	Eventually(t, 20*time.Second, func() (err error) { holder, err = dc1.MapHolder("ext"); return err })
	waitImported(t, dc1, "ext", "bob")

	// alice lives on a node that does not hold the link: her sends go
	// through the holder.
	aliceIdx := nonHolder(dc1, holder)
	alice := agentOn(t, dc1, aliceIdx, "alice", nil)
	agentOn(t, dc1, aliceIdx, "carol", nil) // not exported: no proxy on ext
	Eventually(t, 20*time.Second, func() error {
		reg := ext.Node(0).Server().Registry()
		if _, ok := reg.Agent("alice"); !ok {
			return fmt.Errorf("ext has no proxy for alice")
		}
		if _, ok := reg.Agent("carol"); ok {
			return fmt.Errorf("ext has a proxy for carol, who is not exported")
		}
		return nil
	})
	ls, err := dc1.FederationClient(t, aliceIdx).ListLinks(t.Context(), &concordv1.ListLinksRequest{})
	if err != nil || len(ls.GetLinks()) != 1 || ls.GetLinks()[0].GetHolderNodeId() != holder.ID {
		t.Fatalf("ListLinks: %v %v", ls, err)
	}
	if ls.GetLinks()[0].GetLink().GetMap().GetAuth().GetToken() != "" {
		t.Fatal("ListLinks shows the token")
	}

	// dc1 -> ext: delivered once the foreign server took it; bob sees
	// alice's proxy (registered under her id by a server that honours it).
	// (queued until alice's proxy session is up).
	Eventually(t, 20*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": "ext:agent:bob", "payload": map[string]any{"n": 1}})
		if err == nil && !slices.Equal(res.Delivered, []string{"ext:agent:bob"}) {
			return fmt.Errorf("delivered %v queued %v", res.Delivered, res.Queued)
		}
		return err
	})
	waitFrom(t, bob, "alice", 1, 10*time.Second)

	// ext -> dc1: bob sends to alice's proxy; alice hears ext:agent:bob.
	Eventually(t, 20*time.Second, func() error {
		_, err := bob.Send(map[string]any{"to": "alice", "payload": map[string]any{"n": 2}})
		return err
	})
	waitFrom(t, alice, "ext:agent:bob", 2, 10*time.Second)

	// Unknown foreign agent and foreign scopes: clear errors.
	if _, err := alice.Send(map[string]any{"to": "ext:agent:nobody", "payload": 1}); !rpc.IsCode(err, rpc.CodeAgentNotFound) {
		t.Fatalf("send to an unknown foreign agent: %s", Describe(err))
	}
	if _, err := alice.Send(map[string]any{"to": "ext:scope:s", "payload": 1}); !rpc.IsCode(err, 5003) {
		t.Fatalf("send to a foreign scope: %s", Describe(err))
	}

	// Hard stop of the holder: another node takes the link over and bob's
	// messages keep arriving.
	killHolder(t, dc1, holder, "ext")
	keepArriving(t, bob, alice, "alice", "ext:agent:bob", 3)
	Eventually(t, 20*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": "ext:agent:bob", "payload": map[string]any{"n": 100}})
		if err == nil && !slices.Equal(res.Delivered, []string{"ext:agent:bob"}) {
			return fmt.Errorf("delivered %v", res.Delivered)
		}
		return err
	})
	waitFrom(t, bob, "alice", 100, 10*time.Second)
}
