package clustertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// linkServer returns the index in peer of the server node n's stream to
// peer's system is connected to.
func linkServer(t *testing.T, n *Node, peer *Cluster) int {
	t.Helper()
	for _, st := range n.Server().Federation().Status() {
		if st.GetLink().GetPeerSystemId() != peer.SystemID() {
			continue
		}
		for _, pn := range peer.Nodes() {
			if pn.GRPCAddr == st.GetConnectedTo() {
				return pn.Index
			}
		}
	}
	t.Fatalf("%s has no stream to %s", n, peer.SystemID())
	return -1
}

// TestFederation_StreamMovesWhenItsServerDies kills the dc2 server that
// dc1-n1's stream is connected to: the stream moves to another dc2
// server and sends go on.
func TestFederation_StreamMovesWhenItsServerDies(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	alice := agentOn(t, dc1, 0, "alice", nil)
	holder := linkServer(t, dc1.Node(0), dc2)
	bobAt := (holder + 1) % 3
	bob := agentOn(t, dc2, bobAt, "bob", nil)
	sub, err := alice.Subscribe(map[string]any{"filter": map[string]any{"eventTypes": []string{"federation_connected", "federation_disconnected"}}})
	if err != nil {
		t.Fatal(err)
	}

	dc2.Kill(t, holder)
	Eventually(t, 10*time.Second, func() error {
		if err := dc1.LinkUp("dc2"); err != nil {
			return err
		}
		if now := linkServer(t, dc1.Node(0), dc2); now == holder {
			return fmt.Errorf("stream still on the killed server")
		}
		return nil
	})
	// The killed server may have been dc2's leader: sends are retried
	// until the remote system acknowledges one (none is lost silently).
	Eventually(t, 10*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": "after"})
		if err != nil {
			return err
		}
		if !slices.Equal(res.Delivered, []string{"dc2:agent:bob"}) {
			return fmt.Errorf("delivered %v", res.Delivered)
		}
		return nil
	})
	if _, err := bob.WaitMessages(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.WaitEvents(sub, 5*time.Second, func(evs []EventNote) error {
		var kinds []string
		for _, e := range evs {
			kinds = append(kinds, e.Event.Type)
		}
		if !slices.Contains(kinds, "federation_disconnected") || !slices.Contains(kinds, "federation_connected") {
			return fmt.Errorf("events %v", kinds)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFederation_PartitionBuffersAndDrainsInOrder cuts dc1 from dc2:
// local work goes on at full speed, sends to dc2 are queued, and on heal
// the buffer drains in order with nothing lost or duplicated.
func TestFederation_PartitionBuffersAndDrainsInOrder(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	alice := agentOn(t, dc1, 0, "alice", nil)
	carol := agentOn(t, dc1, 1, "carol", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)

	side1, side2 := dc1.NodeIDs(), dc2.NodeIDs()
	dc1.Net.Partition(side1, side2)
	Eventually(t, 10*time.Second, func() error {
		for _, st := range dc1.Node(0).Server().Federation().Status() {
			if st.GetState() == "up" {
				return fmt.Errorf("link still up")
			}
		}
		return nil
	})

	const n = 20
	for i := range n {
		res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": i}})
		if err != nil {
			t.Fatalf("send %d during the partition: %s", i, Describe(err))
		}
		if len(res.Delivered) != 0 || !slices.Equal(res.Queued, []string{"dc2:agent:bob"}) {
			t.Fatalf("send %d: %+v, want queued", i, res)
		}
	}
	// A dead peer system never slows local work.
	start := time.Now()
	if res, err := alice.Send(map[string]any{"to": "carol", "payload": "local"}); err != nil || len(res.Delivered) != 1 {
		t.Fatalf("local send during the partition: %v %s", res, Describe(err))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("local send took %v during the partition", d)
	}
	if _, err := carol.WaitMessages(1, 2*time.Second); err != nil {
		t.Fatal(err)
	}

	dc1.Net.Heal()
	msgs, err := bob.WaitMessages(n, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a duplicate would arrive right behind
	msgs = bob.Messages()
	if len(msgs) != n {
		t.Fatalf("bob got %d messages, want exactly %d", len(msgs), n)
	}
	for i, m := range msgs {
		var p struct{ Seq int }
		if err := json.Unmarshal(m.Payload, &p); err != nil || p.Seq != i {
			t.Fatalf("message %d has seq %s: out of order", i, m.Payload)
		}
	}
}

// TestFederation_SurvivesRestartAndLeaderChange restarts a dc1 node and
// kills dc1's leader: the link is Raft state, so the restarted node's
// stream comes back, and the new leader keeps importing dc2's directory.
func TestFederation_SurvivesRestartAndLeaderChange(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	leader := dc1.Leader(t)
	other := others(dc1.Nodes(), leader)[0]
	dc1.Stop(t, other.Index)
	dc1.Restart(t, other.Index)
	dc1.Kill(t, leader.Index)
	Eventually(t, 15*time.Second, func() error {
		if n := dc1.Leader(t); n == leader {
			return fmt.Errorf("no new leader")
		}
		return dc1.LinkUp("dc2")
	})
	agentOn(t, dc2, 0, "late", nil) // registered after the leader change
	waitImported(t, dc1, "dc2", "late")
	alice := agentOn(t, dc1, other.Index, "alice", nil)
	if res, err := alice.Send(map[string]any{"to": "dc2:agent:late", "payload": 1}); err != nil || len(res.Delivered) != 1 {
		t.Fatalf("send after restart and leader change: %v %s", res, Describe(err))
	}

	// A server added to dc2 after the token reaches dc1's link over it.
	added := dc2.AddNode(t)
	Eventually(t, 15*time.Second, func() error {
		for _, n := range dc1.Running() {
			for _, l := range n.Server().Federation().Status() {
				if !slices.Contains(l.GetLink().GetPeerAddrs(), added.GRPCAddr) {
					return fmt.Errorf("%s: link addrs %v lack %s", n, l.GetLink().GetPeerAddrs(), added.GRPCAddr)
				}
			}
		}
		return nil
	})
}
