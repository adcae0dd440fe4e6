package clustertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestFederation_BurstLargerThanBufferWhileUp pipelines three times the
// outage buffer's default 1,000 messages at a remote agent over a healthy
// link: the buffer bounds what waits for a stream, not the send queue of
// a link that is up, so every message is delivered (before, the burst's
// oldest were dropped with "link down" on a link that was up).
func TestFederation_BurstLargerThanBufferWhileUp(t *testing.T) {
	dc1, dc2 := burstSystems(t, nil)
	bob := agentOn(t, dc2, 0, "bob", nil)
	alice := agentOn(t, dc1, 0, "alice", nil)
	sendDelivered(t, alice, "dc2:agent:bob", "warm-up")
	const n = 3000
	answers := pipelineBurst(t, dc1, n)
	for i, a := range answers {
		if !bytes.Contains(a, []byte(`"delivered":["dc2:agent:bob"]`)) {
			t.Fatalf("answer %d of %d: %s", i, n, a)
		}
	}
	if _, err := bob.WaitMessages(n+1, DeliveryTimeout); err != nil {
		t.Fatal(err)
	}
}

// TestFederation_StalledStreamBoundsItsQueue blackholes the systems
// before a burst: the stream stays "up" until its silence limit, and its
// send queue stops at 16 times the outage bound (here 4 messages): later
// sends are refused at once, retryable, instead of growing memory, and
// nothing is dropped silently. After the heal what was queued arrives,
// in order, and nothing arrives twice.
func TestFederation_StalledStreamBoundsItsQueue(t *testing.T) {
	dc1, dc2 := burstSystems(t, &concordv1.FedBufferPolicy{MaxMessages: 4})
	bob := agentOn(t, dc2, 0, "bob", nil)
	alice := agentOn(t, dc1, 0, "alice", nil)
	sendDelivered(t, alice, "dc2:agent:bob", "warm-up")
	dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
	const n = 3000
	answers := pipelineBurst(t, dc1, n)
	var queued, congested, unknown []int
	for i, a := range answers {
		switch {
		case bytes.Contains(a, []byte(`"queued":["dc2:agent:bob"]`)):
			queued = append(queued, i)
		case bytes.Contains(a, []byte(`is congested`)):
			congested = append(congested, i)
		case bytes.Contains(a, []byte(`"code":5000`)) && !bytes.Contains(a, []byte(`dropped`)):
			unknown = append(unknown, i)
		default:
			t.Fatalf("answer %d: %s", i, a)
		}
	}
	if len(congested) == 0 || len(queued) == 0 || len(queued) > 16*4 {
		t.Fatalf("%d queued (at most 64), %d refused as congested, %d unknown: want the queue bounded", len(queued), len(congested), len(unknown))
	}
	dc1.Net.Heal()
	// A queued message may still be dropped, counted, by the outage
	// policy (drop-oldest at 4) if a send lands after the stream is
	// declared down; the burst is normally answered long before that.
	var dropped int
	Eventually(t, DeliveryTimeout, func() error {
		dropped = 0
		for _, st := range dc1.Node(0).Server().Federation().Status() {
			dropped += int(st.GetDropped())
		}
		if got := len(burstSeqs(t, bob)); got < len(queued)-dropped {
			return fmt.Errorf("bob has %d of the %d queued messages (%d dropped)", got, len(queued), dropped)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // a duplicate would arrive right behind
	got := burstSeqs(t, bob)
	seen, last := map[int]bool{}, -1
	for _, g := range got {
		if seen[g] {
			t.Fatalf("bob got %d twice", g)
		}
		seen[g] = true
		// Queued messages drain in order; one whose outcome was unknown
		// (in flight on the stalled stream) may still land when the old
		// connection resumes, at most once.
		if slices.Contains(queued, g) {
			if g < last {
				t.Fatalf("queued %d arrived after queued %d", g, last)
			}
			last = g
		}
	}
	missing := 0
	for _, q := range queued {
		if !slices.Contains(got, q) {
			missing++
		}
	}
	if missing > dropped {
		t.Fatalf("%d queued messages never arrived, %d counted as dropped", missing, dropped)
	}
	for _, g := range got {
		if !slices.Contains(queued, g) && !slices.Contains(unknown, g) {
			t.Fatalf("message %d arrived but its send was refused", g)
		}
	}
	t.Logf("%d queued, %d refused as congested, %d unknown; bob got %d", len(queued), len(congested), len(unknown), len(got))
}

// burstSystems starts dc1 and dc2 (one node each) and links them, both
// exporting everything, with buffer as both sides' outage policy.
func burstSystems(t *testing.T, buffer *concordv1.FedBufferPolicy) (dc1, dc2 *Cluster) {
	t.Helper()
	net := NewNetwork(t, nil)
	dc1 = New(t, 1, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 = New(t, 1, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())
	Link(t, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll, Buffer: buffer})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	return dc1, dc2
}

// pipelineBurst writes n map/send frames to dc2:agent:bob (payload: the
// frame's number, also its id) on a new raw connection to dc1's node and
// returns the answers indexed by that number.
func pipelineBurst(t *testing.T, dc1 *Cluster, n int) [][]byte {
	t.Helper()
	ws, _, err := corkedDialer(nil).Dial(dc1.Node(0).MAPURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":-1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"agent","participantId":"burst"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := ws.ReadMessage(); err != nil || !bytes.Contains(data, []byte(`"result"`)) {
		t.Fatalf("connect: %s %v", data, err)
	}
	go func() { // the writer may block on a full window: answers are read below
		for i := range n {
			frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"map/send","params":{"to":"dc2:agent:bob","payload":{"seq":%d}}}`, i, i)
			if ws.WriteMessage(websocket.TextMessage, []byte(frame)) != nil {
				return
			}
		}
	}()
	answers := make([][]byte, n)
	for range n {
		_ = ws.SetReadDeadline(time.Now().Add(2 * DeliveryTimeout))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("answers: %v", err)
		}
		var a struct{ ID int }
		if err := json.Unmarshal(data, &a); err != nil || a.ID < 0 || a.ID >= n {
			t.Fatalf("answer %s: %v", data, err)
		}
		answers[a.ID] = data
	}
	return answers
}

// burstSeqs is the seq of every burst message c received, in order.
func burstSeqs(t *testing.T, c *Client) []int {
	t.Helper()
	var out []int
	for _, m := range c.Messages() {
		var p struct {
			Seq *int `json:"seq"`
		}
		if json.Unmarshal(m.Payload, &p) == nil && p.Seq != nil {
			out = append(out, *p.Seq)
		}
	}
	return out
}

// sendDelivered sends until the remote system acknowledges one delivery
// (the directory import and a new stream may still be under way).
func sendDelivered(t testing.TB, from *Client, to string, payload any) {
	t.Helper()
	Eventually(t, ConvergeTimeout, func() error {
		res, err := from.Send(map[string]any{"to": to, "payload": payload})
		if err != nil {
			return fmt.Errorf("send to %s: %s", to, Describe(err))
		}
		if !slices.Equal(res.Delivered, []string{to}) {
			return fmt.Errorf("send to %s: %+v", to, res)
		}
		return nil
	})
}
