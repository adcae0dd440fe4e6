package rpc

import (
	"testing"
	"time"
)

// CloseWithin toward a peer that reads says goodbye as Close does: the
// frames queued before it arrive and the peer sees a normal close frame,
// not a cut socket. (Toward a peer that stopped reading it cuts the
// socket after the grace: node's TestMapConn_ClosePromptTowardStalledServer.)
func TestCloseWithin_HealthyPeerGetsGoodbye(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	c := dialClient(t, url, nil)
	const notes = 50
	for i := range notes {
		if err := c.Notify("note", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := c.CloseWithin("done", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("CloseWithin took %s toward a peer that reads", d)
	}
	server := recvConn(t, h.conns)
	if got := recvConn(t, h.closed); got != server {
		t.Fatal("another connection closed")
	}
	if n := len(h.notifications()); n != notes {
		t.Fatalf("server got %d of %d notifications queued before the close", n, notes)
	}
	if code, _ := server.closeState(); code != closeNormal {
		t.Fatalf("server saw close code %d, want %d (the client's close frame)", code, closeNormal)
	}
}
