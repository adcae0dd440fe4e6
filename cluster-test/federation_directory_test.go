package clustertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestFederation_DirectoryChunksAndLeaderStreamDown: dc2 exports a
// directory many times larger than one chunk (the chunk bound is set to
// its 1 KiB minimum), which dc1 imports whole in several Raft entries;
// then dc1's leader is cut from dc2 and an agent registered in dc2 still
// reaches dc1's directory, imported by a follower whose stream is up.
func TestFederation_DirectoryChunksAndLeaderStreamDown(t *testing.T) {
	const chunk = 1 << 10
	small := WithNodeConfig(func(_ int, c *node.Config) { c.Federation.DirectoryChunkBytes = chunk })
	net := NewNetwork(t, nil)
	dc1 := New(t, 3, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure(), small)
	dc2 := New(t, 3, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure(), small)
	Link(t, dc1, dc2, LinkSpec{ToExport: exportAll})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })

	const n = 40
	reg := dc2.Connect(t, 0, map[string]any{"participantType": "agent", "participantId": "registrar", "name": "registrar"})
	var want []string
	for i := range n {
		id := fmt.Sprintf("agent-%02d", i)
		registerRetry(t, reg, id, map[string]any{"description": strings.Repeat("d", 120)})
		want = append(want, id)
	}
	waitImported(t, dc1, "dc2", want...)
	size := 0
	for _, a := range dc1.Node(0).Server().Federation().RemoteAgents([]string{"dc2"})["dc2"] {
		size += proto.Size(a)
	}
	if size < 4*chunk {
		t.Fatalf("imported directory of %d bytes needs no chunking (chunk %d)", size, chunk)
	}

	leader := dc1.Leader(t)
	for _, id := range dc2.NodeIDs() {
		net.Delay(leader.ID, id, time.Hour)
		net.Delay(id, leader.ID, time.Hour)
	}
	t.Cleanup(net.Heal)
	linkDown(t, leader, "dc2")
	registerRetry(t, reg, "late", nil)
	want = append(want, "late")
	slices.Sort(want)
	waitImported(t, dc1, "dc2", want...)
	if st := statusOf(leader, "dc2"); st.GetState() == "up" {
		t.Fatalf("the leader's stream came back (%s): the test proves nothing", st.GetState())
	}
}

func statusOf(n *Node, peer string) *concordv1.FedLinkStatus {
	for _, st := range n.Server().Federation().Status() {
		if st.GetLink().GetPeerSystemId() == peer {
			return st
		}
	}
	return nil
}

// hasLink reports whether every running node of c has (or lacks) a link
// to peer.
func hasLink(c *Cluster, peer string, want bool) error {
	for _, n := range c.Running() {
		if _, ok := n.Server().Federation().State().Link(peer); ok != want {
			return fmt.Errorf("%s: link to %s present=%v, want %v", n, peer, ok, want)
		}
	}
	return nil
}

// TestFederation_UnlinkReachesPeerAfterOutage unlinks dc2 on dc1 while
// dc2 is unreachable: dc1 removes its side at once and keeps a pending
// unlink, which its leader retries; once dc2 is back it removes its side
// and the pending record goes. A forced unlink drops the record.
func TestFederation_UnlinkReachesPeerAfterOutage(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	ctx, cancel := context.WithTimeout(context.Background(), 2*CallTimeout)
	defer cancel()
	res, err := dc1.FederationClient(t, 1).Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: "dc2"})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetPeerNotified() || !res.GetPending() || res.GetPeerError() == "" {
		t.Fatalf("unlink with dc2 unreachable: %+v, want pending", res)
	}
	Eventually(t, 10*time.Second, func() error { return hasLink(dc1, "dc2", false) })
	list, err := dc1.FederationClient(t, 0).ListLinks(ctx, &concordv1.ListLinksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p := list.GetPendingUnlinks(); len(p) != 1 || p[0].GetLink().GetPeerSystemId() != "dc2" {
		t.Fatalf("pending unlinks %v", p)
	}
	time.Sleep(time.Second) // several retries fail meanwhile
	if err := hasLink(dc2, "dc1", true); err != nil {
		t.Fatal(err)
	}

	dc1.Net.Heal()
	Eventually(t, 20*time.Second, func() error { return hasLink(dc2, "dc1", false) })
	Eventually(t, 10*time.Second, func() error {
		for _, n := range dc1.Running() {
			if p := n.Server().Federation().State().PendingUnlinks(); len(p) != 0 {
				return fmt.Errorf("%s still has pending unlinks %v", n, p)
			}
		}
		return nil
	})

	// Forced: relink, cut, unlink, then drop the pending record by force.
	Link(t, dc1, dc2, LinkSpec{ToExport: exportAll})
	dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	if res, err := dc1.FederationClient(t, 0).Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: "dc2"}); err != nil || !res.GetPending() {
		t.Fatalf("unlink: %+v %v", res, err)
	}
	if _, err := dc1.FederationClient(t, 0).Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: "dc2", Force: true}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() error {
		for _, n := range dc1.Running() {
			if p := n.Server().Federation().State().PendingUnlinks(); len(p) != 0 {
				return fmt.Errorf("%s: forced unlink kept %v", n, p)
			}
		}
		return nil
	})
	if _, err := dc1.FederationClient(t, 0).Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: "dc2", Force: true}); err == nil {
		t.Fatal("a second forced unlink of nothing succeeded")
	}
}
