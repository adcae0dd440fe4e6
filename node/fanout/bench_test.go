package fanout

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/concordmap/concord/node/registry"
)

type nopConn struct{}

func (nopConn) NotifyRaw(string, json.RawMessage) error { return nil }

// BenchmarkPublishEphemeral measures one message event fanned out to 16
// local subscriptions (half of them filtered out): matching, encoding the
// map/event notification per subscription and the enqueue (a no-op conn).
func BenchmarkPublishEphemeral(b *testing.B) {
	reg := newFakeRegistry(10)
	cfg := testConfig(reg, &fakeProposer{reg: reg})
	h, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	h.conns = func(string) (notifier, bool) { return nopConn{}, true }
	for i := range 16 {
		f := `{"eventTypes":["message.*"]}`
		if i%2 == 1 {
			f = `{"eventTypes":["agent_registered"]}`
		}
		sp, err := parseSubscribe(json.RawMessage(`{"filter":` + f + `}`))
		if err != nil {
			b.Fatal(err)
		}
		h.subs[strconv.Itoa(i)] = &sub{id: "sub-" + strconv.Itoa(i), sessionID: "s", filter: sp.filter}
	}
	h.count.Store(16)
	ev := registry.Event{ID: "01JABCDEFGHJKMNPQRSTVWXYZ0", Type: "message_sent", Timestamp: 1, Source: "a",
		Data: json.RawMessage(`{"messageId":"m","from":"a","to":"b","timestamp":1,"payload":{"x":1}}`), AgentIDs: []string{"a", "b"}}
	b.ReportAllocs()
	for b.Loop() {
		h.PublishEphemeral(ev)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
