package node_test

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// paddedRequest returns a map/agents/list request of exactly size bytes.
func paddedRequest(id string, size int) string {
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"map/agents/list","params":{"_meta":{"pad":"`, id)
	tail := `"}}}`
	return head + strings.Repeat("a", size-len(head)-len(tail)) + tail
}

// TestProbe_FrameSizeLimit: a frame of exactly MaxFrameBytes is served, one
// byte more is refused with -32600 echoing the id, and the connection
// stays usable (node/rpc/doc.go "Oversized frames").
func TestProbe_FrameSizeLimit(t *testing.T) {
	srv := startProbeNode(t, nil)
	limit := 64 << 10
	ws := dialProbe(t, srv)
	ws.connectAgent()

	ws.send(paddedRequest("at", limit))
	got := ws.collectUntilSentinel(1)
	var r rpcReply
	if len(got) != 1 || jsonUnmarshal(got[0], &r) != nil || r.Error != nil {
		t.Fatalf("a frame at the limit must be served, got %q", got)
	}

	before := markState(srv)
	ws.send(paddedRequest("over", limit+1))
	got = ws.collectUntilSentinel(1)
	if len(got) != 1 {
		t.Fatalf("want one reply to the oversized frame, got %q", got)
	}
	checkError(t, got[0], wantErr{code: -32600, id: `"over"`, category: "protocol"})
	checkUnchanged(t, srv, before)

	// Far over the limit, as a batch: one reply, still the same connection.
	ws.send("[" + paddedRequest("huge", 4*limit) + "]")
	got = ws.collectUntilSentinel(1)
	if len(got) != 1 {
		t.Fatalf("want one reply to the oversized batch, got %q", got)
	}
	checkError(t, got[0], wantErr{code: -32600, category: "protocol"})
	ws.mustCall("map/agents/list", map[string]any{})
}

// TestProbe_SubscribeFlood: one anonymous session subscribing again and
// again is capped (4002 QUOTA_EXCEEDED, not retryable) and the refusal
// writes nothing; unsubscribing makes room again.
func TestProbe_SubscribeFlood(t *testing.T) {
	const max = 4
	srv := startProbeNode(t, func(c *node.Config) { c.MAP.MaxSessionSubscriptions = max })
	ws := dialProbe(t, srv)
	ws.connectAgent()
	var first string
	for i := range max {
		res := ws.mustCall("map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}})
		if i == 0 {
			first, _ = res["subscriptionId"].(string)
		}
	}
	before := markState(srv)
	for range 3 {
		ws.send(`{"jsonrpc":"2.0","id":"flood","method":"map/subscribe","params":{}}`)
		got := ws.collectUntilSentinel(1)
		if len(got) != 1 {
			t.Fatalf("want one reply, got %q", got)
		}
		checkError(t, got[0], wantErr{code: 4002, id: `"flood"`, category: "resource"})
	}
	checkUnchanged(t, srv, before)
	ws.mustCall("map/unsubscribe", map[string]any{"subscriptionId": first})
	ws.mustCall("map/subscribe", map[string]any{})
}

// TestProbe_DefaultLimits: production defaults bound what the probes
// exhaust with small test limits.
func TestProbe_DefaultLimits(t *testing.T) {
	c := node.DefaultConfig()
	if c.MAP.MaxSessionSubscriptions <= 0 {
		t.Errorf("MAP.MaxSessionSubscriptions default %d: an anonymous session could subscribe without bound", c.MAP.MaxSessionSubscriptions)
	}
	if c.MAP.AnonymousSessionRate <= 0 || c.MAP.AnonymousSessionBurst <= 0 {
		t.Errorf("MAP.AnonymousSessionRate/Burst default %v/%d: an anonymous caller could open sessions without bound",
			c.MAP.AnonymousSessionRate, c.MAP.AnonymousSessionBurst)
	}
	if c.Cluster.HandshakeTimeout <= 0 || c.Cluster.HandshakeTimeout > 30*time.Second {
		t.Errorf("Cluster.HandshakeTimeout default %v: half a TLS hello holds a gRPC socket too long", c.Cluster.HandshakeTimeout)
	}
	if c.RPC.PreAuthTimeout <= 0 || c.RPC.MaxPreAuthConnsPerIP <= 0 || c.HTTPReadHeaderTimeout <= 0 {
		t.Errorf("pre-auth bounds unset: %+v", c.RPC)
	}
}

// TestProbe_AnonymousConnectionFlood: one address opening sockets and never
// authenticating gets 429 past MaxPreAuthConnsPerIP; the sockets it holds
// are closed after PreAuthTimeout, and then it may connect again.
func TestProbe_AnonymousConnectionFlood(t *testing.T) {
	const perIP = 4
	srv := startProbeNode(t, func(c *node.Config) {
		c.RPC.MaxPreAuthConnsPerIP = perIP
		// Long enough for a map/connect on a loaded machine: the timer
		// also ends a connect still in flight.
		c.RPC.PreAuthTimeout = time.Second
	})
	var held []*rawWS
	for range perIP {
		ws, _, err := dialProbeErr(srv)
		if err != nil {
			t.Fatalf("dial within the bound: %v", err)
		}
		held = append(held, ws)
	}
	_, resp, err := dialProbeErr(srv)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("dial past the per-IP bound: want 429, got %v %v", err, resp)
	}
	// An HTTP+SSE session is the same kind of slot.
	post, perr := httpsClient("dev", "").Post(srv.HTTPURL()+"/map/rpc", "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"map/agents/list"}`))
	if perr != nil {
		t.Fatal(perr)
	}
	body, _ := io.ReadAll(post.Body)
	_ = post.Body.Close()
	if post.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("HTTP session past the per-IP bound: want 429, got %d %s", post.StatusCode, body)
	}
	checkError(t, body, wantErr{code: 4000, id: "null", category: "resource"})
	// Held sockets are closed by the node (PreAuthTimeout), not by us.
	for _, ws := range held {
		_ = ws.conn.SetReadDeadline(time.Now().Add(probeTimeout))
		if _, _, err := ws.conn.ReadMessage(); err == nil {
			t.Fatal("an unauthenticated socket got a message instead of being closed")
		}
		_ = ws.conn.Close()
	}
	waitFor(t, func() error {
		ws, _, err := dialProbeErr(srv)
		if err != nil {
			return err
		}
		defer ws.conn.Close()
		ws.t = t
		ws.connectAgent()
		return nil
	})
}

// TestProbe_Slowloris: half a frame (or half an upgrade request) and then
// silence must not hold a socket forever: pre-auth sockets are closed by
// PreAuthTimeout, authenticated ones by the keepalive (no pong), headers
// by HTTPReadHeaderTimeout.
func TestProbe_Slowloris(t *testing.T) {
	srv := startProbeNode(t, func(c *node.Config) {
		c.RPC.PreAuthTimeout = time.Second // see TestProbe_AnonymousConnectionFlood
		c.RPC.PingInterval = 300 * time.Millisecond
		c.RPC.PongTimeout = 300 * time.Millisecond
		c.HTTPReadHeaderTimeout = 300 * time.Millisecond
	})
	halfFrame := func(w *rawWS) {
		// A masked text frame announcing 1,000 bytes, of which 10 come.
		hdr := []byte{0x81, 0x80 | 126, 0, 0, 1, 2, 3, 4}
		binary.BigEndian.PutUint16(hdr[2:4], 1000)
		if _, err := w.conn.UnderlyingConn().Write(append(hdr, []byte(`{"jsonrpc"`)...)); err != nil {
			t.Fatalf("write half a frame: %v", err)
		}
	}
	t.Run("half a frame before connect", func(t *testing.T) {
		ws := dialProbe(t, srv)
		halfFrame(ws)
		expectClosed(t, ws.conn.UnderlyingConn())
	})
	t.Run("half a frame after connect", func(t *testing.T) {
		ws := dialProbe(t, srv)
		ws.connectAgent()
		halfFrame(ws)
		expectClosed(t, ws.conn.UnderlyingConn())
	})
	t.Run("half the upgrade headers", func(t *testing.T) {
		c, err := tls.Dial("tcp", srv.HTTPAddr(), tlstest.ClientTLS("dev", ""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /map HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c)
	})
	// The node still serves.
	ws := dialProbe(t, srv)
	ws.connectAgent()
	ws.mustCall("map/agents/list", map[string]any{})
}

// expectClosed reads c until the node closes it; it fails if that takes
// longer than probeTimeout.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(probeTimeout))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // a close frame or an HTTP error, then EOF
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the node kept a stalled socket open for %v", probeTimeout)
		}
		return
	}
}

// waitFor retries f until it succeeds or probeTimeout passes.
func waitFor(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(probeTimeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", probeTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProbe_NoAnonymousOutsideDev: with the production ACL (no anonymous
// types), map/connect without a credential is 1000 with authRequired,
// nothing is written, and the socket is closed at PreAuthTimeout.
func TestProbe_NoAnonymousOutsideDev(t *testing.T) {
	srv := startProbeNode(t, func(c *node.Config) {
		c.ACL.AnonymousTypes = nil
		c.RPC.PreAuthTimeout = time.Second
	})
	var refused []*rawWS
	for _, ptype := range []string{"agent", "client", "system", "gateway"} {
		ws := dialProbe(t, srv)
		refused = append(refused, ws)
		before := markState(srv)
		ws.send(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"` + ptype + `"}}`)
		got := ws.collectUntilSentinel(1)
		if len(got) != 1 {
			t.Fatalf("%s: want one reply, got %q", ptype, got)
		}
		checkError(t, got[0], wantErr{code: 1000, id: "1", category: "auth"})
		if !strings.Contains(string(got[0]), "authRequired") {
			t.Errorf("%s: 1000 without authRequired details: %s", ptype, got[0])
		}
		checkUnchanged(t, srv, before)
	}
	for _, ws := range refused {
		expectClosed(t, ws.conn.UnderlyingConn())
	}
}

// TestProbe_NeverReadsReplies: a peer that pipelines requests and never
// reads the replies is cut off at WriteTimeout (its queue is bounded), and
// the node keeps serving others.
func TestProbe_NeverReadsReplies(t *testing.T) {
	srv := startProbeNode(t, func(c *node.Config) {
		c.RPC.SendQueueLen = 4
		c.RPC.SendQueueBytes = 4 << 10
		c.RPC.WriteTimeout = 500 * time.Millisecond
	})
	ws := dialProbe(t, srv)
	ws.connectAgent()
	// Every reply carries a 48 KiB agent: they fill the socket buffers
	// quickly, then the node's write blocks.
	ws.mustCall("map/agents/register", map[string]any{"agentId": "big", "metadata": map[string]any{"pad": strings.Repeat("m", 48<<10)}})
	req := []byte(`{"jsonrpc":"2.0","id":1,"method":"map/agents/get","params":{"agentId":"big"}}`)
	deadline := time.Now().Add(3 * probeTimeout)
	var werr error
	for time.Now().Before(deadline) && werr == nil {
		_ = ws.conn.SetWriteDeadline(time.Now().Add(probeTimeout))
		werr = ws.conn.WriteMessage(websocket.TextMessage, req)
	}
	if werr == nil {
		t.Fatalf("the node still took requests after %v from a peer that reads nothing", 3*probeTimeout)
	}
	checkNodeServes(t, srv)
}
