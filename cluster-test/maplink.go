package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// MapLink links c to the foreign MAP server at url as system id through
// node i's admin API (`concord federation link --kind map`). It fails t on
// error.
func (c *Cluster) MapLink(t testing.TB, i int, req *concordv1.CreateMapLinkRequest) *concordv1.FedLink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	res, err := c.FederationClient(t, i).CreateMapLink(ctx, req)
	if err != nil {
		t.Fatalf("clustertest: map link %s -> %s: %v", c.SystemID(), req.GetSystemId(), err)
	}
	return res.GetLink()
}

// MapHolder returns the node holding the map link to peer, as every
// running node's replica agrees, once that node reports the link up (an
// Eventually check).
func (c *Cluster) MapHolder(peer string) (*Node, error) {
	var holder string
	for _, n := range c.Running() {
		l, ok := n.Server().Federation().State().Link(peer)
		if !ok {
			return nil, fmt.Errorf("%s has no link to %s", n, peer)
		}
		h := l.GetMap().GetHolderNodeId()
		if h == "" || (holder != "" && h != holder) {
			return nil, fmt.Errorf("%s: holder of %s is %q (others: %q)", n, peer, h, holder)
		}
		holder = h
	}
	n := c.NodeByID(holder)
	if n == nil || n.Server() == nil {
		return nil, fmt.Errorf("holder %s of %s is not running", holder, peer)
	}
	for _, st := range n.Server().Federation().Status() {
		if st.GetLink().GetPeerSystemId() == peer && st.GetState() == "up" {
			return n, nil
		}
	}
	return nil, fmt.Errorf("holder %s: map link to %s not up", holder, peer)
}

// killHolder kills (hard stop) holder, the node holding c's map link to
// peer, and returns the node that takes the link over.
func killHolder(t testing.TB, c *Cluster, holder *Node, peer string) *Node {
	t.Helper()
	c.Kill(t, holder.Index)
	var next *Node
	Eventually(t, 30*time.Second, func() (err error) {
		next, err = c.MapHolder(peer)
		if err == nil && next.ID == holder.ID {
			return fmt.Errorf("holder still %s", holder.ID)
		}
		return err
	})
	return next
}
