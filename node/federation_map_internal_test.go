package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/federation/connclose/stalltest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// mapCloseBound is how long closing a map link's connection may take
// toward a foreign server that stopped reading: connclose.Grace plus
// room for a loaded -race run, well under the WebSocket WriteTimeout
// (10 s) that the close frame waited before.
const mapCloseBound = 2 * time.Second

// Closing a map link's connection to a foreign MAP server that accepted
// the WebSocket and then stopped reading, with its socket full, returns
// promptly: the close frame cannot go out, so the socket is cut after
// connclose.Grace instead of waiting the write timeout for it.
func TestMapConn_ClosePromptTowardStalledServer(t *testing.T) {
	addr := stalltest.WebSocket(t, nil)
	s := &Server{}
	s.cfg.Federation = federation.DefaultConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := s.mapDialer()(ctx, &concordv1.FedMapLink{Url: "ws://" + addr + "/map"}, func(string, json.RawMessage) {})
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(mapConn).c
	// Fill the sockets until the writer blocks and the send queue refuses.
	pad := json.RawMessage(`{"pad":"` + strings.Repeat("x", 32<<10) + `"}`)
	fillBy := time.Now().Add(10 * time.Second)
	for c.NotifyRaw("x-test/fill", pad) == nil {
		if time.Now().After(fillBy) {
			t.Fatal("the stalled server's socket never filled")
		}
	}

	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conn.Close()
	}()
	select {
	case <-closed:
		t.Logf("closed in %s toward a stalled server", time.Since(start).Round(time.Millisecond))
	case <-time.After(mapCloseBound):
		<-closed // no goroutine outlives the test
		t.Fatalf("closing the connection to a stalled server took %s, want under %s",
			time.Since(start).Round(time.Millisecond), mapCloseBound)
	}
}
