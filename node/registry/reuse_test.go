package registry

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// TestUpdateBodyReuse_NothingKeptPointsIntoBody: once Apply returns, the
// AGENT_UPDATE body goes back to be decoded into again (reuse.go). Every
// field of a released body is overwritten here, as the next decode
// would, and the state, the events and the (lazy) result read afterwards
// must be what they were: nothing the registry keeps may point into it.
func TestUpdateBodyReuse_NothingKeptPointsIntoBody(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("sess1", "p1", "", 0))
	h.must(cAgentRegister, register("a1", inSession("sess1", "p1")))
	hd := h.s.Handlers()[cAgentUpdate]

	var results []raftstore.LazyResult
	var want []string
	for i, upd := range []*concordv1.AgentUpdateRequest{
		{Meta: meta("01HZZZZZZZZZZZZZZZZZZZZZZ1"), AgentId: "a1", State: proto.String(StateBusy), Reason: "working <now>"},
		{Meta: meta("01HZZZZZZZZZZZZZZZZZZZZZZ2"), AgentId: "a1", Transition: TransitionSuspend, Name: proto.String("renamed"),
			Description: proto.String("d"), Role: proto.String("r"), Metadata: []byte(`{"k":2}`)},
		{Meta: meta("01HZZZZZZZZZZZZZZZZZZZZZZ3"), AgentId: "a1", Transition: TransitionResume},
		{Meta: meta(), AgentId: "a1", State: proto.String(StateIdle), Reason: "no ids: derived"},
		{Meta: meta("01HZZZZZZZZZZZZZZZZZZZZZZ4"), AgentId: "a1", State: proto.String(StateBusy),
			OriginSessionId: "sess1", OriginSessionEpoch: 1},
	} {
		b, err := proto.Marshal(upd)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := hd.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		h.index++
		res, err := hd.Apply(h.index, msg)
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		body := h.s.updates.spare.Load()
		if body == nil || msg != proto.Message(&body.req) {
			t.Fatalf("update %d: its body was not taken back for reuse", i)
		}
		lazy := res.(raftstore.LazyResult)
		results = append(results, lazy)
		want = append(want, fmt.Sprintf("%+v", lazy.Value()))
		before := dump(h.s)
		poisonUpdateBody(body)
		if after := dump(h.s); after != before {
			t.Fatalf("update %d: state changed when its released body was overwritten:\nbefore %s\nafter  %s", i, before, after)
		}
	}
	for i, r := range results {
		if got := fmt.Sprintf("%+v", r.Value()); got != want[i] {
			t.Fatalf("result %d changed after later updates reused the body:\n got %s\nwant %s", i, got, want[i])
		}
	}
}

// poisonUpdateBody overwrites every field of a body, strings with new
// ones and the id array in place.
func poisonUpdateBody(b *agentUpdateBody) {
	p := "poisoned"
	b.req.AgentId, b.req.Transition, b.req.Reason = p, p, p
	b.req.Name, b.req.Description, b.req.Role, b.req.Visibility = &p, &p, &p, &p
	b.req.Metadata, b.req.Environment = []byte(p), []byte(p)
	b.req.OwnerId, b.req.SessionId, b.req.HomeNode = p, p, p
	b.req.OriginSessionId, b.req.OriginSessionEpoch = p, 1<<40
	b.meta.TimestampMs, b.meta.NodeId, b.meta.Source = 1, p, p
	b.ids[0] = p
	b.state = p
}
