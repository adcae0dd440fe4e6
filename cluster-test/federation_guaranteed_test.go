package clustertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

var guaranteed = map[string]any{"delivery": "guaranteed"}

// linkDown waits until node n's stream to peer is not up.
func linkDown(t *testing.T, n *Node, peer string) {
	t.Helper()
	Eventually(t, 15*time.Second, func() error {
		for _, st := range n.Server().Federation().Status() {
			if st.GetLink().GetPeerSystemId() == peer && st.GetState() == "up" {
				return fmt.Errorf("%s: link to %s still up", n, peer)
			}
		}
		return nil
	})
}

// outboxDepth waits until every running node of c reports want messages
// in its replicated outbox to peer.
func outboxDepth(t *testing.T, c *Cluster, peer string, want int) {
	t.Helper()
	Eventually(t, 30*time.Second, func() error {
		for _, n := range c.Running() {
			for _, st := range n.Server().Federation().Status() {
				if st.GetLink().GetPeerSystemId() == peer && int(st.GetOutboxDepth()) != want {
					return fmt.Errorf("%s: outbox to %s holds %d, want %d", n, peer, st.GetOutboxDepth(), want)
				}
			}
		}
		return nil
	})
}

// exactlyInOrder checks that c received exactly the seqs want, in order,
// after a pause in which a duplicate would arrive.
func exactlyInOrder(t *testing.T, c *Client, want []int) {
	t.Helper()
	if _, err := c.WaitMessages(len(want), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would arrive right behind
	if got := received(t, c); !slices.Equal(got, want) {
		t.Fatalf("received %v, want exactly %v", got, want)
	}
}

func seqs(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestFederation_GuaranteedSurvivesKillOfTheAcceptingNode: guaranteed
// sends taken by dc1's leader while dc2 is unreachable answer queued and
// sit in dc1's replicated outbox; the leader (which took them and drains
// the outbox) is killed, the systems heal, and every message arrives
// exactly once, in order.
func TestFederation_GuaranteedSurvivesKillOfTheAcceptingNode(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	leader := dc1.Leader(t)
	alice := agentOn(t, dc1, leader.Index, "alice", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)

	// With the link up a guaranteed send answers honestly: delivered.
	res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": 0}, "meta": guaranteed})
	if err != nil || !slices.Equal(res.Delivered, []string{"dc2:agent:bob"}) {
		t.Fatalf("guaranteed send with the link up: %+v %s", res, Describe(err))
	}
	outboxDepth(t, dc1, "dc2", 0)

	dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	linkDown(t, leader, "dc2")
	const n = 8
	must, may := []int{0}, []int(nil)
	for i := 1; i < n; i++ {
		res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": i}, "meta": guaranteed})
		switch {
		case err == nil && len(res.Delivered) == 0 && slices.Equal(res.Queued, []string{"dc2:agent:bob"}):
			must = append(must, i)
		case outcomeUnknown(err):
			may = append(may, i) // an election under load: stored or not
		default:
			t.Fatalf("guaranteed send %d during the partition: %+v %s, want queued", i, res, Describe(err))
		}
	}
	if len(may) == 0 {
		outboxDepth(t, dc1, "dc2", n-1) // replicated: every node holds them
	}

	dc1.Kill(t, leader.Index)
	dc1.Net.Heal()
	onceInOrder(t, bob, must, may)
	outboxDepth(t, dc1, "dc2", 0)
}

// outcomeUnknown reports whether err is the retryable 5000 a guaranteed
// send answers when its outbox write's outcome is unknown (leadership
// lost while committing: the message may or may not be queued).
func outcomeUnknown(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodeFederationUnavailable && IsRetryable(err) &&
		strings.Contains(re.Message, "may or may not be queued")
}

// TestFederation_GuaranteedExactlyOnceAcrossLeaderKill queues guaranteed
// messages during a partition, heals, and kills dc1's leader (the outbox
// drainer) as soon as the first arrives, with the rest in flight: the
// new leader sends again what the old one had not stored as answered,
// and dc2's inbox answers those "duplicate". Every send that answered
// queued arrives exactly once (one that answered 5000 at most once), in
// order.
func TestFederation_GuaranteedExactlyOnceAcrossLeaderKill(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	leader := dc1.Leader(t)
	alice := agentOn(t, dc1, others(dc1.Nodes(), leader)[0].Index, "alice", nil)
	bob := agentOn(t, dc2, 2, "bob", nil)

	dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	linkDown(t, leader, "dc2")
	must, may := sendGuaranteed(t, alice, "bob", 0, 60, nil)
	dc1.Net.Heal()
	if _, err := bob.WaitMessages(1, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	dc1.Kill(t, leader.Index)
	got := onceInOrder(t, bob, must, may)
	outboxDepth(t, dc1, "dc2", 0)
	t.Logf("%d queued, %d unknown; received %d", len(must), len(may), len(got))
}

// TestFederation_GuaranteedPartitionDrainsInOrder sends guaranteed and
// best-effort messages while the systems are cut apart: both answer
// queued; after healing each stream arrives exactly once in order
// (best effort unchanged: the outage buffer).
func TestFederation_GuaranteedPartitionDrainsInOrder(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	alice := agentOn(t, dc1, 0, "alice", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)
	carol := agentOn(t, dc2, 2, "carol", nil)

	dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	linkDown(t, dc1.Node(0), "dc2")
	const n = 20
	for i := range n {
		for _, to := range []string{"bob", "carol"} {
			p := map[string]any{"to": "dc2:agent:" + to, "payload": map[string]any{"seq": i}}
			if to == "bob" {
				p["meta"] = guaranteed
			}
			res, err := alice.Send(p)
			if err != nil || !slices.Equal(res.Queued, []string{"dc2:agent:" + to}) {
				t.Fatalf("send %d to %s during the partition: %+v %s, want queued", i, to, res, Describe(err))
			}
		}
	}
	outboxDepth(t, dc1, "dc2", n) // only the guaranteed ones are in Raft
	dc1.Net.Heal()
	exactlyInOrder(t, bob, seqs(n))
	exactlyInOrder(t, carol, seqs(n))
	outboxDepth(t, dc1, "dc2", 0)
}

// TestFederation_GuaranteedLinkPolicyAndFullOutbox: a link whose policy
// says guaranteed makes every send over it guaranteed; its outbox is
// bounded, and a send past the bound gets a clear 5000 and is not kept.
func TestFederation_GuaranteedLinkPolicyAndFullOutbox(t *testing.T) {
	net := NewNetwork(t, nil)
	dc1 := New(t, 3, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 := New(t, 3, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())
	Link(t, dc1, dc2, LinkSpec{ToExport: exportAll, FromOutbox: &concordv1.FedOutboxPolicy{Guaranteed: true, MaxMessages: 3}})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	alice := agentOn(t, dc1, 0, "alice", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)

	net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	linkDown(t, dc1.Node(0), "dc2")
	for i := range 3 {
		if res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": i}}); err != nil || len(res.Queued) != 1 {
			t.Fatalf("send %d: %+v %s", i, res, Describe(err))
		}
	}
	outboxDepth(t, dc1, "dc2", 3)
	_, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": 3}})
	re := requireMAPError(t, err, rpc.CodeFederationUnavailable, true)
	if !strings.Contains(re.Message, "outbox") || !strings.Contains(re.Message, "full") {
		t.Fatalf("full outbox answered %q", re.Message)
	}
	outboxDepth(t, dc1, "dc2", 3)
	net.Heal()
	exactlyInOrder(t, bob, seqs(3))
}

// received decodes the seq of every message c got, in arrival order.
func received(t *testing.T, c *Client) []int {
	t.Helper()
	var out []int
	for _, m := range c.Messages() {
		var p struct{ Seq int }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Seq)
	}
	return out
}

// TestFederation_GuaranteedAckLostIsNotDeliveredTwice blocks the acks of
// the dc2 server that dc1's leader (the outbox drainer) streams to: dc2
// delivers and records the messages (sent at once, so several reach that
// server while its acks are stuck) but dc1 never hears so. The stream
// goes silent, moves to another dc2 server and sends them again (or,
// while it is down, relays them through a follower's stream); dc2's
// inbox (its Raft state) answers "duplicate", so bob gets each once.
func TestFederation_GuaranteedAckLostIsNotDeliveredTwice(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	leader := dc1.Leader(t)
	alice := agentOn(t, dc1, leader.Index, "alice", nil)
	server := dc2.Node(linkServer(t, leader, dc2))
	bob := agentOn(t, dc2, (server.Index+1)%3, "bob", nil)

	dc1.Net.Delay(server.ID, leader.ID, time.Hour) // acks and pongs never arrive
	// Each send answers queued (no ack comes back in time) or, should the
	// leader change under load, 5000 (outcome unknown).
	const n = 5
	var (
		mu        sync.Mutex
		must, may []int
		wg        sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, y := sendGuaranteed(t, alice, "bob", i, i+1, nil)
			mu.Lock()
			must, may = append(must, m...), append(may, y...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	outboxDepth(t, dc1, "dc2", 0) // resent on another stream (or relayed through a follower's) and answered
	Eventually(t, 15*time.Second, func() error {
		for _, st := range leader.Server().Federation().Status() {
			if st.GetLink().GetPeerSystemId() == "dc2" && st.GetState() == "up" {
				if linkServer(t, leader, dc2) == server.Index {
					return errors.New("the stream did not move")
				}
				return nil
			}
		}
		return fmt.Errorf("%s: no stream to dc2 yet", leader)
	})
	dc1.Net.Heal()
	got := receivedAll(t, bob, must, may) // sent at once: in any order
	slices.Sort(got)
	if len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("delivered twice: %v", got)
	}
}

// sendGuaranteed sends seqs from..to-1 guaranteed from c to dc2's agent
// to, calling before(i) first when set. must lists the sends answered
// delivered or queued, may those answered 5000 (outcome unknown).
func sendGuaranteed(t *testing.T, c *Client, to string, from, n int, before func(int)) (must, may []int) {
	t.Helper()
	for i := from; i < n; i++ {
		if before != nil {
			before(i)
		}
		res, err := c.Send(map[string]any{"to": "dc2:agent:" + to, "payload": map[string]any{"seq": i}, "meta": guaranteed})
		var re *rpc.Error
		switch {
		case err == nil && (len(res.Delivered) == 1 || len(res.Queued) == 1):
			must = append(must, i)
		case errors.As(err, &re) && re.Code == rpc.CodeFederationUnavailable:
			may = append(may, i)
		default:
			t.Fatalf("send %d: %+v %s", i, res, Describe(err))
		}
	}
	return must, may
}

// onceInOrder is receivedAll, then checks that nothing arrived twice or
// out of order.
func onceInOrder(t *testing.T, c *Client, must, may []int) []int {
	t.Helper()
	got := receivedAll(t, c, must, may)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("out of order or duplicated: %d after %d in %v", got[i], got[i-1], got)
		}
	}
	return got
}

// receivedAll waits until c received every seq in must, waits a moment
// for duplicates, checks nothing outside must and may arrived, and
// returns what c received in arrival order.
func receivedAll(t *testing.T, c *Client, must, may []int) []int {
	t.Helper()
	Eventually(t, 30*time.Second, func() error {
		got := received(t, c)
		for _, s := range must {
			if !slices.Contains(got, s) {
				return fmt.Errorf("acknowledged message %d missing from %v", s, got)
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // a duplicate would arrive right behind
	got := received(t, c)
	for _, s := range got {
		if !slices.Contains(must, s) && !slices.Contains(may, s) {
			t.Fatalf("received %d that was never sent", s)
		}
	}
	return got
}

// TestFederation_GuaranteedRelayedWhileOnlyTheLeadersStreamIsCut cuts
// only dc1's leader (the outbox drainer) from dc2: the other dc1 nodes'
// streams stay up, so the leader relays the outbox through one of them.
// Guaranteed sends answer delivered (or queued, when the answer takes
// longer than GuaranteedWait on a loaded host), arrive exactly once in
// order, and the leader's stream is still cut once all arrived: the
// leader is the only one that drains the outbox, so the relay carried
// them.
//
// An election under load (dc1's leader or term changes during a round)
// means the new leader, whose stream is up, may have sent them itself:
// that round proves nothing about the relay. Its sends are still checked
// (delivered or queued must arrive, a retryable 5000 "may or may not be
// queued" at most once, all in order), and the next round cuts the new
// leader's stream instead, until a round runs under one leader. dc1's
// raft timings are three times the preset's: with the preset, -race beside
// a CPU hog held elections every few seconds, through four rounds in a row.
func TestFederation_GuaranteedRelayedWhileOnlyTheLeadersStreamIsCut(t *testing.T) {
	net := NewNetwork(t, nil)
	relay := WithNodeConfig(func(_ int, c *node.Config) { c.Federation.RelayGuaranteed = true })
	calm := WithNodeConfig(func(_ int, c *node.Config) {
		c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout = 3*RaftHeartbeat, 3*RaftElection
		c.Raft.LeaderLeaseTimeout = 3 * RaftHeartbeat
	})
	dc1 := New(t, 3, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure(), relay, calm)
	dc2 := New(t, 3, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure(), relay)
	Link(t, dc1, dc2, LinkSpec{ToExport: exportAll})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	leader := dc1.Leader(t)
	alice := agentOn(t, dc1, others(dc1.Nodes(), leader)[0].Index, "alice", nil)
	bob := agentOn(t, dc2, 1, "bob", nil)

	const n, rounds = 10, 4
	var must, may []int
	for round := 0; ; round++ {
		if round == rounds {
			t.Fatalf("dc1's leadership moved during each of %d rounds: the relay was never the only path", rounds)
		}
		term := leader.term()
		dc1.Net.Heal()
		dc1.Net.Cut(leader.ID, dc2.NodeIDs()...)
		linkDown(t, leader, "dc2")
		Eventually(t, 15*time.Second, func() error { // a stream to relay through
			for _, f := range others(dc1.Running(), leader) {
				if linkUpOn(f, "dc2") {
					return nil
				}
			}
			return errors.New("no follower's stream to dc2 is up")
		})
		var delivered, queued, unknown []int
		for i := round * n; i < (round+1)*n; i++ {
			res, err := alice.Send(map[string]any{"to": "dc2:agent:bob", "payload": map[string]any{"seq": i}, "meta": guaranteed})
			switch {
			case err == nil && slices.Equal(res.Delivered, []string{"dc2:agent:bob"}):
				delivered = append(delivered, i)
			case err == nil && slices.Equal(res.Queued, []string{"dc2:agent:bob"}):
				queued = append(queued, i) // stored, answer slower than GuaranteedWait
			case outcomeUnknown(err):
				unknown = append(unknown, i) // an election under load: stored or not
			default:
				t.Fatalf("guaranteed send %d with only the leader's stream cut: %+v %s", i, res, Describe(err))
			}
		}
		must = append(append(must, delivered...), queued...)
		may = append(may, unknown...)
		outboxDepth(t, dc1, "dc2", 0)
		now := dc1.Leader(t)
		if now.ID == leader.ID && now.term() == term {
			t.Logf("round %d under one leader with its stream cut: delivered %v, queued %v, outcome unknown %v", round, delivered, queued, unknown)
			if len(delivered)+len(queued) == 0 {
				t.Fatalf("under one leader with its stream cut no send was acknowledged (outcome unknown %v)", unknown)
			}
			break
		}
		t.Logf("round %d: dc1's leadership moved from %s (term %d) to %s (term %d); cutting the new leader's stream (delivered %v, queued %v, outcome unknown %v)",
			round, leader, term, now, now.term(), delivered, queued, unknown)
		leader = now
	}
	onceInOrder(t, bob, must, may)
	linkDown(t, leader, "dc2") // still cut: the relay delivered them
}

// linkUpOn reports whether n's stream to peer is up.
func linkUpOn(n *Node, peer string) bool {
	for _, st := range n.Server().Federation().Status() {
		if st.GetLink().GetPeerSystemId() == peer && st.GetState() == "up" {
			return true
		}
	}
	return false
}
