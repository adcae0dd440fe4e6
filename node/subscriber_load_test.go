package node_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// TestSubscribers_NeverReadingStayBounded (issue 12: 20 subscribers that
// never read, 200 events of 200 KB took RSS from 42 to 720 MB): with the
// notification queue bounded in bytes (rpc.Config.NotifyQueueBytes) the
// heap grows by a bounded amount, far below what 32 MiB per connection
// allowed. Bounded load: 20 subscribers, 100 events of 200 KB.
func TestSubscribers_NeverReadingStayBounded(t *testing.T) {
	srv := startNode(t, t.TempDir())
	pub := dial(t, srv)
	pub.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "pub"})
	pub.call("map/agents/register", map[string]any{"agentId": "pub"})

	const subscribers, events, size = 20, 100, 200 << 10
	dialer := websocket.Dialer{TLSClientConfig: tlstest.ClientTLS("dev", "")}
	for i := range subscribers {
		ws, _, err := dialer.Dial(srv.MAPURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ws.Close() })
		for j, frame := range []string{
			fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"map/connect","params":{"protocolVersion":1,"participantType":"client","participantId":"sub-%d"}}`, i),
			`{"jsonrpc":"2.0","id":2,"method":"map/subscribe","params":{"filter":{"eventTypes":["agent_environment_changed"]}}}`,
		} {
			if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
				t.Fatal(err)
			}
			_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, b, err := ws.ReadMessage(); err != nil || strings.Contains(string(b), `"error"`) {
				t.Fatalf("subscriber %d step %d: %s %v", i, j, b, err)
			}
		}
		// From here on the subscriber never reads.
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	blob := strings.Repeat("x", size)
	for i := range events {
		pub.call("map/agents/update", map[string]any{"agentId": "pub", "environment": map[string]any{"n": i, "blob": blob}})
	}
	time.Sleep(500 * time.Millisecond) // let the fan-out push what it can
	grew := int64(heap()) - int64(before)
	// Per subscriber: its queue (NotifyQueueBytes) and the batch being
	// written; plus the retained events themselves.
	limit := int64(subscribers*2*rpc.DefaultConfig().NotifyQueueBytes) + 3*events*size
	old := int64(subscribers) * int64(events) * size // what unbounded queues would hold
	t.Logf("heap grew %d MiB for %d non-reading subscribers x %d events of %d KiB (bound %d MiB; unbounded queues would hold %d MiB)",
		grew>>20, subscribers, events, size>>10, limit>>20, old>>20)
	if grew > limit {
		t.Fatalf("heap grew %d MiB, more than the %d MiB bound", grew>>20, limit>>20)
	}
}
