package registry

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// sessionWrite is one write a MAP connection makes for its session, built
// quoting the attach epoch ep (0 = no precondition, as an older proposer
// or a system below FSMLevelSessionWrites sends it).
type sessionWrite struct {
	name  string
	typ   T
	build func(ep uint64) proto.Message
}

// sessionWrites are the writes FSMLevelSessionWrites covers, each from
// the connection of session s1 (participant p1, agent a1, a member of
// scope "in" and not of "out"; subscription sub1).
func sessionWrites() []sessionWrite {
	return []sessionWrite{
		{"agent update", cAgentUpdate, func(ep uint64) proto.Message {
			return &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", State: proto.String(StateBusy),
				OriginSessionId: "s1", OriginSessionEpoch: ep}
		}},
		{"agent state change (stop)", cAgentUpdate, func(ep uint64) proto.Message {
			m := transition("a1", TransitionStop)
			m.OriginSessionId, m.OriginSessionEpoch = "s1", ep
			return m
		}},
		{"agent unregister", cAgentUnregister, func(ep uint64) proto.Message {
			return &concordv1.AgentUnregisterRequest{Meta: meta(), AgentId: "a1", Reason: "bye", OriginSessionId: "s1", OriginSessionEpoch: ep}
		}},
		{"scope create", cScopeCreate, func(ep uint64) proto.Message {
			m := scope("new", func(r *concordv1.ScopeRecord) { r.OwnerId = "p1" })
			m.OriginSessionId, m.OriginSessionEpoch = "s1", ep
			return m
		}},
		{"scope delete", cScopeDelete, func(ep uint64) proto.Message {
			return &concordv1.ScopeDeleteRequest{Meta: meta(), ScopeId: "out", OriginSessionId: "s1", OriginSessionEpoch: ep}
		}},
		{"scope join", cScopeJoin, func(ep uint64) proto.Message {
			return &concordv1.ScopeJoinRequest{Meta: meta(), ScopeId: "out", AgentId: "a1", OriginSessionId: "s1", OriginSessionEpoch: ep}
		}},
		{"scope leave", cScopeLeave, func(ep uint64) proto.Message {
			return &concordv1.ScopeLeaveRequest{Meta: meta(), ScopeId: "in", AgentId: "a1", OriginSessionId: "s1", OriginSessionEpoch: ep}
		}},
		{"subscription add", cSubAdd, func(ep uint64) proto.Message {
			return &concordv1.SubscriptionAddRequest{Meta: meta(), SessionEpoch: ep,
				Subscription: &concordv1.SubscriptionRecord{Id: "sub2", SessionId: "s1", Filter: []byte(`{}`)}}
		}},
		{"subscription remove", cSubRemove, func(ep uint64) proto.Message {
			return &concordv1.SubscriptionRemoveRequest{Meta: meta(), SessionId: "s1", SubscriptionId: "sub1", SessionEpoch: ep}
		}},
	}
}

// writesBase: s1 attached on n1 at epoch 1 (orphan policy, so its agent
// outlives a detach), a1 in scope "in", scope "out", subscription sub1.
func writesBase() []logStep {
	return []logStep{
		{cScopeCreate, scope("in", func(r *concordv1.ScopeRecord) { r.OwnerId = "p1" })},
		{cScopeCreate, scope("out", func(r *concordv1.ScopeRecord) { r.OwnerId = "p1" })},
		{cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)},
		{cAgentRegister, register("a1", inSession("s1", "p1"), func(r *concordv1.AgentRecord) { r.Scopes = []string{"in"} })},
		{cSubAdd, &concordv1.SubscriptionAddRequest{Meta: meta(), Subscription: &concordv1.SubscriptionRecord{Id: "sub1", SessionId: "s1", Filter: []byte(`{}`)}}},
	}
}

// TestState_SessionWriteEpoch: every write a connection makes for its
// session, quoting the attach epoch it holds, applies while the session is
// at that epoch and is refused (ErrSessionMoved, state unchanged) once
// the session moved on; without the epoch it applies as before. Each
// case's log is built once and applied to three fresh replicas, which
// must end identical.
func TestState_SessionWriteEpoch(t *testing.T) {
	moves := []struct {
		name  string
		steps func() []logStep
		quote uint64 // the epoch the write quotes
		apply bool   // the write applies
	}{
		{"at the epoch", func() []logStep { return nil }, 1, true},
		{"resumed elsewhere, from the old connection", func() []logStep {
			return []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}}
		}, 1, false},
		{"resumed elsewhere, from the new connection", func() []logStep {
			return []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}}
		}, 2, true},
		{"detached (connection lost)", func() []logStep {
			return []logStep{{cSessionDetach, detach("s1", 1, 60_000)}}
		}, 1, false},
		{"closed (map/disconnect)", func() []logStep {
			return []logStep{{cSessionClose, &concordv1.SessionCloseRequest{Meta: meta(), SessionId: "s1", Epoch: 1, Reason: "bye", TtlMs: 60_000}}}
		}, 1, false},
		{"expired (gone)", func() []logStep {
			return []logStep{
				{cSessionDetach, detach("s1", 1, 1000)},
				{cSessionExpire, &concordv1.SessionExpireRequest{Meta: metaAt(tsNow + 10_000), SessionId: "s1", Epoch: 2, Kind: ExpireTTL}},
			}
		}, 1, false},
		{"resumed elsewhere, no epoch (older proposer): applies as before", func() []logStep {
			return []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}}
		}, 0, true},
	}
	for _, w := range sessionWrites() {
		for _, mv := range moves {
			t.Run(w.name+"/"+mv.name, func(t *testing.T) {
				steps := append(writesBase(), mv.steps()...)
				last := w.build(mv.quote)
				var dumps []string
				for r := range 3 {
					h := newHarness(t, 100)
					for _, st := range steps {
						h.must(st.typ, st.msg)
					}
					if mv.apply {
						before := dump(h.s)
						h.must(w.typ, last)
						if dump(h.s) == before {
							t.Fatalf("replica %d: the write changed nothing", r)
						}
					} else {
						h.refuse(w.typ, last, CodeExhausted) // also: state unchanged
					}
					dumps = append(dumps, dump(h.s))
				}
				if dumps[1] != dumps[0] || dumps[2] != dumps[0] {
					t.Fatal("replicas differ")
				}
			})
		}
	}
}

// TestState_SessionWriteError: the refusal is the retryable sentinel
// mapsvc turns into 4000 with reason session_moved, for each write.
func TestState_SessionWriteError(t *testing.T) {
	for _, w := range sessionWrites() {
		h := newHarness(t, 100)
		for _, st := range writesBase() {
			h.must(st.typ, st.msg)
		}
		h.must(cSessionOpen, resumeFrom("s1", "n2", 1))
		_, err := h.apply(w.typ, w.build(1))
		var re *Error
		if !errors.Is(err, ErrSessionMoved) || !errors.As(err, &re) || re.Field != "sessionId" {
			t.Fatalf("%s from a stale connection: %v, want ErrSessionMoved on sessionId", w.name, err)
		}
		if errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrAgentNotFound) {
			t.Fatalf("%s: %v matches another sentinel", w.name, err)
		}
	}
}

// TestState_CursorSessionEpoch: a cursor quoting its connection's attach
// epoch moves while the session was not attached again since (the
// connection's own detach or close does not count: Detach flushes the
// last cursors as the connection goes); once another connection attached
// it, the cursor is skipped, and the other cursors of the batch still move.
func TestState_CursorSessionEpoch(t *testing.T) {
	detach1 := logStep{cSessionDetach, detach("s1", 1, 60_000)}
	tests := []struct {
		name  string
		steps []logStep
		quote uint64
		moved bool
	}{
		{"at the epoch", nil, 1, true},
		{"after its own connection's detach", []logStep{detach1}, 1, true},
		{"after its own connection's close", []logStep{{cSessionClose, &concordv1.SessionCloseRequest{Meta: meta(), SessionId: "s1", Epoch: 1, TtlMs: 60_000}}}, 1, true},
		{"resumed elsewhere", []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}}, 1, false},
		{"detached, then resumed", []logStep{detach1, {cSessionOpen, resumeFrom("s1", "n2", 2)}}, 1, false},
		{"resumed, then detached", []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}, {cSessionDetach, detach("s1", 2, 60_000)}}, 1, false},
		{"from the new connection", []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}}, 2, true},
		{"resumed elsewhere, no epoch (older proposer)", []logStep{{cSessionOpen, resumeFrom("s1", "n2", 1)}}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := append(writesBase(),
				logStep{cSessionOpen, openSession("s2", "p2", BehaviorOrphan, 0)},
				logStep{cSubAdd, &concordv1.SubscriptionAddRequest{Meta: meta(), Subscription: &concordv1.SubscriptionRecord{Id: "sub9", SessionId: "s2"}}})
			steps = append(steps, tt.steps...)
			batch := &concordv1.SubscriptionCursorRequest{Meta: meta(), Cursors: []*concordv1.SubscriptionCursor{
				{SessionId: "s1", SubscriptionId: "sub1", EventId: "e7", Seq: 7, SessionEpoch: tt.quote},
				{SessionId: "s2", SubscriptionId: "sub9", EventId: "e3", Seq: 3, SessionEpoch: 1},
			}}
			want := 1
			if tt.moved {
				want = 2
			}
			var dumps []string
			for r := range 3 {
				h := newHarness(t, 100)
				for _, st := range steps {
					h.must(st.typ, st.msg)
				}
				if got := h.must(cSubCursor, batch); got != want {
					t.Fatalf("replica %d: %v cursors moved, want %d", r, got, want)
				}
				s1, _ := h.s.Session("s1")
				if seq := s1.Subscriptions[0].CursorSeq; (seq == 7) != tt.moved {
					t.Fatalf("replica %d: sub1 cursor at %d, moved %v", r, seq, tt.moved)
				}
				dumps = append(dumps, dump(h.s))
			}
			if dumps[1] != dumps[0] || dumps[2] != dumps[0] {
				t.Fatal("replicas differ")
			}
		})
	}
}

// TestDecode_OriginCostsNoAllocation: the hand decoder reads an update's
// origin session into the same allocation as its agent id, whatever their
// lengths: the hot write keeps its allocation count once every server
// enforces FSMLevelSessionWrites.
func TestDecode_OriginCostsNoAllocation(t *testing.T) {
	long := "agent-" + string(make([]byte, 40)) // past any small-string buffer
	body := func(origin bool) []byte {
		m := &concordv1.AgentUpdateRequest{Meta: meta("01HZX3J5V6Q7R8S9T0V1W2X3Y4"), AgentId: long, State: proto.String(StateBusy)}
		if origin {
			m.OriginSessionId, m.OriginSessionEpoch = "session-"+long, 7
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	allocs := func(b []byte) float64 {
		return testing.AllocsPerRun(100, func() {
			if _, ok := decodeAgentUpdate(b); !ok {
				t.Fatal("declined")
			}
		})
	}
	without, with := allocs(body(false)), allocs(body(true))
	if with != without {
		t.Fatalf("decoding an update takes %.0f allocations with its origin, %.0f without", with, without)
	}
	m, _ := decodeAgentUpdate(body(true))
	if m.GetAgentId() != long || m.GetOriginSessionId() != "session-"+long || m.GetOriginSessionEpoch() != 7 {
		t.Fatalf("decoded %v", m)
	}
}
