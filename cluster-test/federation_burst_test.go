package clustertest

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestFederation_BurstLargerThanBufferWhileUp pipelines three times the
// outage buffer's default 1,000 messages at a remote agent over a healthy
// link: the buffer bounds what waits for a stream, not the send queue of
// a link that is up, so every message is delivered (before, the burst's
// oldest were dropped with "link down" on a link that was up).
func TestFederation_BurstLargerThanBufferWhileUp(t *testing.T) {
	net := NewNetwork(t, nil)
	dc1 := New(t, 1, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 := New(t, 1, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())
	Link(t, dc1, dc2, LinkSpec{FromExport: exportAll, ToExport: exportAll})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	bob := agentOn(t, dc2, 0, "bob", nil)
	alice := agentOn(t, dc1, 0, "alice", nil)
	sendDelivered(t, alice, "dc2:agent:bob", "warm-up")

	ws, _, err := corkedDialer(nil).Dial(dc1.Node(0).MAPURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"agent","participantId":"burst"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := ws.ReadMessage(); err != nil || !bytes.Contains(data, []byte(`"result"`)) {
		t.Fatalf("connect: %s %v", data, err)
	}
	const n = 3000
	frame := []byte(`{"jsonrpc":"2.0","id":2,"method":"map/send","params":{"to":"dc2:agent:bob","payload":"x"}}`)
	go func() { // the writer may block on a full window: answers are read below
		for range n {
			if ws.WriteMessage(websocket.TextMessage, frame) != nil {
				return
			}
		}
	}()
	for i := range n {
		_ = ws.SetReadDeadline(time.Now().Add(DeliveryTimeout))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if !bytes.Contains(data, []byte(`"delivered":["dc2:agent:bob"]`)) {
			t.Fatalf("answer %d of %d: %s", i, n, data)
		}
	}
	if _, err := bob.WaitMessages(n+1, DeliveryTimeout); err != nil {
		t.Fatal(err)
	}
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
