package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fedStatus is node i's status of its link to peer.
func fedStatus(t *testing.T, c *Cluster, i int, peer string) *concordv1.FedLinkStatus {
	t.Helper()
	for _, st := range c.Node(i).Server().Federation().Status() {
		if st.GetLink().GetPeerSystemId() == peer {
			return st
		}
	}
	t.Fatalf("%s has no link to %s", c.Node(i), peer)
	return nil
}

// TestFederation_DirectStreamToHome: dc1's node 0 streams to one dc2
// server; bob lives on another. Once dc1 imported bob's home server,
// alice's messages go on a direct stream to it: the stream-holding
// server receives none of them, bob's server counts them as direct, and
// bob gets every message in order across the switch from the main
// stream. Then bob's server is killed: each message answers delivered
// (after bob resumed on another server, by relay or a new direct
// stream) or an honest error, and every one answered delivered arrives,
// once, in order.
func TestFederation_DirectStreamToHome(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	holder := fedStatus(t, dc1, 0, "dc2").GetConnectedTo()
	home := -1
	leader := dc2.Leader(t).Index
	for i, n := range dc2.Nodes() { // not the stream's server; not the leader when a choice is left
		if n.GRPCAddr != holder && (home < 0 || i != leader) {
			home = i
		}
	}
	homeAddr := dc2.Node(home).GRPCAddr
	holderIdx := slices.IndexFunc(dc2.Nodes(), func(n *Node) bool { return n.GRPCAddr == holder })
	t.Logf("dc1 node 0 streams to %s; bob lives on %s", holder, homeAddr)

	alice := agentOn(t, dc1, 0, "alice", map[string]any{"role": "public"})
	bob := agentOn(t, dc2, home, "bob", nil)
	Eventually(t, 10*time.Second, func() error {
		a, ok := dc1.Node(0).Server().Federation().State().RemoteAgent("dc2", "bob")
		if !ok || a.GetHomeAddr() != homeAddr {
			return fmt.Errorf("dc1 imported bob with home %q, want %q", a.GetHomeAddr(), homeAddr)
		}
		return nil
	})

	seq := 0
	send := func() error {
		res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": seq}})
		if err == nil && !slices.Equal(res.Delivered, []string{"dc2:agent:bob"}) {
			err = fmt.Errorf("send %d: delivered %v", seq, res.Delivered)
		}
		seq++
		return err
	}
	// The first message asks for the direct stream and takes the main one;
	// later ones switch once it is up.
	Eventually(t, 10*time.Second, func() error {
		if err := send(); err != nil {
			t.Fatalf("send: %s", Describe(err))
		}
		if n := fedStatus(t, dc1, 0, "dc2").GetDirectSent(); n == 0 {
			return errors.New("no message sent on a direct stream yet")
		}
		return nil
	})
	const direct = 20
	before := fedStatus(t, dc2, holderIdx, "dc1").GetReceived()
	beforeDirect := fedStatus(t, dc2, home, "dc1").GetDirectReceived()
	for range direct {
		if err := send(); err != nil {
			t.Fatalf("send: %s", Describe(err))
		}
	}
	if got := fedStatus(t, dc2, holderIdx, "dc1").GetReceived() - before; got != 0 {
		t.Fatalf("the stream-holding server received %d of the direct messages", got)
	}
	if got := fedStatus(t, dc2, home, "dc1").GetDirectReceived() - beforeDirect; got != direct {
		t.Fatalf("bob's server received %d messages on direct streams, want %d", got, direct)
	}
	if st := fedStatus(t, dc1, 0, "dc2"); st.GetDirectStreams() != 1 || st.GetSent() < uint64(seq) {
		t.Fatalf("dc1 node 0: %d direct streams up, sent %d, want 1 and >= %d", st.GetDirectStreams(), st.GetSent(), seq)
	}
	Eventually(t, 5*time.Second, func() error {
		if got := received(t, bob); len(got) != seq {
			return fmt.Errorf("bob received %d of %d", len(got), seq)
		}
		return nil
	})
	got := received(t, bob)
	for i, s := range got {
		if s != i {
			t.Fatalf("bob received %v: out of order across the switch to the direct stream", got)
		}
	}

	// Bob's server dies; bob resumes on the third server. Until dc1
	// imports his new home, messages take the main stream and the
	// holder relays them; then a direct stream to the new home opens.
	third := 3 - home - holderIdx
	sess := bob.Session()
	dc2.Kill(t, home)
	var must, may []int
	sendAfter := func() {
		s := seq
		err := send()
		var re *rpc.Error
		switch {
		case err == nil:
			must = append(must, s)
		case errors.As(err, &re):
			may = append(may, s) // refused or outcome unknown: an honest error
		default:
			t.Fatalf("send %d: %v", s, err)
		}
	}
	sendAfter() // bob's connection is gone
	back, err := dialTLS(t, dc2.Node(third).MAPURL(), dc2.Ledger, tlstest.ClientTLS(dc2.SystemID(), ""))
	if err != nil {
		t.Fatal(err)
	}
	back.SetToken(dc2.Token())
	err = Poll(context.Background(), MembershipTimeout, func() error {
		_, err := back.Connect(map[string]any{"participantType": "agent", "participantId": sess.ParticipantID,
			"sessionId": sess.SessionID, "resumeToken": sess.ResumeToken, "reclaimAgents": []string{"bob"}})
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("bob resumes: %s", Describe(err))
	}
	Eventually(t, 20*time.Second, func() error {
		sendAfter()
		if len(must) == 0 || must[len(must)-1] != seq-1 {
			return errors.New("not delivered yet")
		}
		if fedStatus(t, dc2, third, "dc1").GetDirectReceived() == 0 {
			return errors.New("no direct stream to bob's new home yet")
		}
		return nil
	})
	for range 5 {
		sendAfter()
	}
	if len(must) < 6 || !slices.Equal(must[len(must)-6:], []int{seq - 6, seq - 5, seq - 4, seq - 3, seq - 2, seq - 1}) {
		t.Fatalf("after bob resumed the last sends were not all delivered (must %v, may %v)", must, may)
	}
	gotBack := onceInOrder(t, back, must, may)
	t.Logf("after the kill: %d delivered, %d refused; bob received %v", len(must), len(may), gotBack)
}
