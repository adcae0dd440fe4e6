package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node"
)

// payload256 is a 256-byte JSON string payload.
var payload256 = `"` + strings.Repeat("x", 254) + `"`

// wsClient is a raw pipelining WebSocket client: the benchmark writes
// frames without waiting for answers, as a busy agent does.
type wsClient struct{ ws *websocket.Conn }

func dialRaw(b *testing.B, url string) *wsClient {
	b.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ws.Close() })
	return &wsClient{ws: ws}
}

func (c *wsClient) call(b *testing.B, id int, method string, params any) json.RawMessage {
	b.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := c.ws.WriteMessage(websocket.TextMessage, req); err != nil {
		b.Fatal(err)
	}
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			b.Fatal(err)
		}
		var resp struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(data, &resp) == nil && resp.ID != nil && *resp.ID == id {
			if resp.Error != nil {
				b.Fatalf("%s: %s", method, resp.Error)
			}
			return resp.Result
		}
	}
}

// BenchmarkMAPSend_AgentToAgent measures map/send from agent A to agent B on
// one node over WebSocket (256-byte payloads): A pipelines requests, and the
// figure is messages B received per second. Compare with
// BenchmarkMAPSend_BaselineWSEcho in the same run.
func BenchmarkMAPSend_AgentToAgent(b *testing.B) {
	cfg := node.DevConfig(b.TempDir())
	srv, err := node.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	a, r := dialRaw(b, srv.MAPURL()), dialRaw(b, srv.MAPURL())
	for i, c := range []*wsClient{a, r} {
		c.call(b, 1, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
		c.call(b, 2, "map/agents/register", map[string]any{"agentId": fmt.Sprintf("bench-%d", i)})
	}
	frame := []byte(`{"jsonrpc":"2.0","id":7,"method":"map/send","params":{"to":{"agent":"bench-1"},"payload":` + payload256 + `}}`)
	pipelined(b, a.ws, r.ws, frame, "map/message")
}

// BenchmarkMAPSend_BaselineWSEcho is the baseline: the same client pipelines
// the same frames to a bare gorilla WebSocket server that echoes each one
// back, with no JSON-RPC, routing or MAP in between.
func BenchmarkMAPSend_BaselineWSEcho(b *testing.B) {
	up := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			mt, data, err := ws.ReadMessage()
			if err != nil || ws.WriteMessage(mt, data) != nil {
				return
			}
		}
	}))
	defer hs.Close()
	c := dialRaw(b, "ws"+strings.TrimPrefix(hs.URL, "http"))
	frame := []byte(`{"jsonrpc":"2.0","id":7,"method":"map/send","params":{"to":{"agent":"bench-1"},"payload":` + payload256 + `}}`)
	pipelined(b, c.ws, c.ws, frame, "")
}

// window bounds the frames in flight (sent, not yet received). Without it a
// receiver that falls behind fills its send queue on the node, which then
// (correctly) drops notifications for the slow consumer, and the count would
// never reach b.N. It stays well below rpc's default SendQueueLen.
const window = 1024

// pipelined writes b.N frames on out while reading on in until b.N frames
// (containing want, when set) have arrived, keeping at most window frames in
// flight; it reports msgs/s.
func pipelined(b *testing.B, out, in *websocket.Conn, frame []byte, want string) {
	b.Helper()
	var received atomic.Int64
	progress := make(chan struct{}, 1)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() {
		for received.Load() < int64(b.N) {
			_, data, err := in.ReadMessage()
			if err != nil {
				done <- err
				return
			}
			if want == "" || strings.Contains(string(data), want) {
				received.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}
		done <- nil
	}()
	if out != in { // the sender's responses must be drained too
		go func() {
			for range b.N {
				if _, _, err := out.ReadMessage(); err != nil {
					return
				}
			}
		}()
	}
	for sent := range b.N {
		for int64(sent)-received.Load() >= window {
			select {
			case <-progress:
			case err := <-done:
				b.Fatalf("receiver stopped after %d of %d: %v", received.Load(), b.N, err)
			case <-time.After(10 * time.Second):
				b.Fatalf("no progress: %d sent, %d received", sent, received.Load())
			}
		}
		if err := out.WriteMessage(websocket.TextMessage, frame); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		b.Fatalf("only %d of %d frames arrived", received.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
