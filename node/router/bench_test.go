package router

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

type nopConn struct{}

func (nopConn) NotifyRaw(string, json.RawMessage) error { return nil }

// BenchmarkRouterSendLocal measures one map/send to a single local agent:
// params decoding, address resolution against the registry, Message
// assembly and the enqueue on the recipient's connection (a no-op conn, so
// the connection's writer is not measured).
func BenchmarkRouterSendLocal(b *testing.B) {
	reg, _ := world()
	r := testRouter(b, reg, nil, nil, nil)
	r.conns = func(string) (notifier, bool) { return nopConn{}, true }
	payload := `{"text":"` + strings.Repeat("x", 256-len(`{"text":""}`)) + `"}`
	params := json.RawMessage(`{"to":{"agent":"w2"},"payload":` + payload + `,"meta":{"correlationId":"c-1"}}`)
	from := agentSender("w1")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.Send(ctx, from, params); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
