package fanout

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/concordmap/concord/node/access"
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

// BenchmarkPublishVisibility fans the same events out to 16 subscribers
// twice per iteration: through a hub without a visibility rule (the
// baseline) and through one applying node/access's rule as the node does
// (agent visibility, the subscribers' agents' canSee permissions, message
// parties). Interleaving the two in one loop keeps machine noise out of
// the ratio it reports (visible/plain).
func BenchmarkPublishVisibility(b *testing.B) {
	reg := newFakeRegistry(10)
	// A tree of 64 agents; every other one is restricted to its kin, a
	// few are hidden from all but their owner.
	for i := range 64 {
		a := registry.Agent{ID: "a" + strconv.Itoa(i), OwnerID: "p" + strconv.Itoa(i%16)}
		if i > 0 {
			a.Parent = "a" + strconv.Itoa((i-1)/2)
		}
		if i%2 == 1 {
			a.PermissionOverrides = json.RawMessage(`{"canSee":{"agents":"hierarchy"}}`)
		}
		if i%7 == 0 {
			a.Visibility = "parent-only"
		}
		reg.addAgent(a)
	}
	owned := map[string][]string{} // session -> its agents
	for i := range 16 {
		owned["s"+strconv.Itoa(i)] = []string{"a" + strconv.Itoa(i), "a" + strconv.Itoa(i+16)}
	}
	sessionAgents := func(sid string) []string { return append([]string(nil), owned[sid]...) } // the copy registry.SessionAgentIDs makes
	build := func(visible bool) *Hub {
		cfg := testConfig(reg, &fakeProposer{reg: reg})
		if visible {
			cfg.Visible = func(sessionID, participantID, participantType string, ev *registry.Event) bool {
				return access.EventVisible(reg, access.Viewer{ParticipantID: participantID, ParticipantType: participantType,
					Agents: sessionAgents(sessionID)}, ev)
			}
		}
		h, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		h.conns = func(string) (notifier, bool) { return nopConn{}, true }
		for i := range 16 {
			sp, err := parseSubscribe(json.RawMessage(`{"filter":{"eventTypes":["message.*","agent_state_changed"]}}`))
			if err != nil {
				b.Fatal(err)
			}
			h.subs[strconv.Itoa(i)] = &sub{id: "sub-" + strconv.Itoa(i), sessionID: "s" + strconv.Itoa(i),
				participantID: "p" + strconv.Itoa(i), participantType: "agent", filter: sp.filter}
		}
		h.count.Store(16)
		return h
	}
	plain, visible := build(false), build(true)
	evs := make([]registry.Event, 8)
	for i := range evs {
		from, to := "a"+strconv.Itoa(i*7%64), "a"+strconv.Itoa((i*13+5)%64)
		if i%2 == 0 {
			evs[i] = registry.Event{ID: "01JABCDEFGHJKMNPQRSTVWXYZ" + strconv.Itoa(i), Type: "message_sent", Timestamp: 1, Source: from,
				Data:     json.RawMessage(`{"messageId":"m","from":"` + from + `","to":"` + to + `","timestamp":1,"payload":{"x":1}}`),
				AgentIDs: []string{from, to}}
		} else {
			evs[i] = registry.Event{ID: "01JABCDEFGHJKMNPQRSTVWXYZ" + strconv.Itoa(i), Type: "agent_state_changed", Timestamp: 1,
				Data: json.RawMessage(`{"agentId":"` + to + `","previous":"idle","current":"busy"}`), AgentIDs: []string{to}}
		}
	}
	var tPlain, tVisible time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		for i := range evs {
			plain.PublishEphemeral(evs[i])
		}
		mid := time.Now()
		for i := range evs {
			visible.PublishEphemeral(evs[i])
		}
		tPlain += mid.Sub(start)
		tVisible += time.Since(mid)
	}
	n := float64(b.N * len(evs))
	b.ReportMetric(float64(tPlain.Nanoseconds())/n, "ns/event-plain")
	b.ReportMetric(float64(tVisible.Nanoseconds())/n, "ns/event-visible")
	b.ReportMetric(float64(tVisible)/float64(tPlain), "visible/plain")
}
