package registry

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func detach(id string, epoch uint64, ttl int64) *concordv1.SessionDetachRequest {
	return &concordv1.SessionDetachRequest{Meta: meta(), SessionId: id, Epoch: epoch, Reason: "conn lost", TtlMs: ttl}
}

func resume(id, node string, hash string) *concordv1.SessionOpenRequest {
	return &concordv1.SessionOpenRequest{Meta: meta(), Resume: true, Session: &concordv1.SessionRecord{
		Id: id, HomeNode: node, ResumeTokenHash: []byte(hash)}}
}

func TestState_SessionOpenAndResume(t *testing.T) {
	h := newHarness(t, 100)
	res := h.must(cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)).(SessionResult)
	if res.Epoch != 1 || !res.Session.Connected || res.Session.HomeNode != "n1" || res.Resumed {
		t.Fatalf("open result %+v", res)
	}
	h.refuse(cSessionOpen, openSession("s1", "p1", "", 0), CodeInvalidRequest)
	h.refuse(cSessionOpen, openSession("", "p1", "", 0), CodeInvalidParams)
	h.refuse(cSessionOpen, openSession("s9", "", "", 0), CodeInvalidParams)
	h.refuse(cSessionOpen, openSession("s9", "p9", "explode", 0), CodeInvalidParams)
	h.refuse(cSessionOpen, resume("nope", "n2", "x"), CodeInvalidRequest)
	h.refuse(cSessionOpen, resume("s1", "n2", "wrong"), CodeAuthFailed)

	h.must(cAgentRegister, register("a1", inSession("s1", "p1")))
	h.must(cAgentRegister, register("a2", inSession("s1", "p1"), func(r *concordv1.AgentRecord) { r.State = StateBusy }))
	d := h.must(cSessionDetach, detach("s1", 1, 60_000)).(DetachResult)
	if !d.Applied || !slices.Equal(d.Orphaned, []string{"a1", "a2"}) {
		t.Fatalf("detach %+v", d)
	}
	a2, _ := h.s.Agent("a2")
	if a2.State != StateOrphaned || a2.OwnerID != "" || a2.HomeNode != "" || a2.Lifecycle.OrphanedAt == 0 {
		t.Fatalf("orphaned agent %+v", a2)
	}
	// A second detach of the same connection is stale.
	if d := h.must(cSessionDetach, detach("s1", 1, 60_000)).(DetachResult); d.Applied {
		t.Fatal("stale detach applied")
	}

	_, last := h.s.Window()
	r := h.must(cSessionOpen, resume("s1", "n2", "hash-s1")).(SessionResult)
	if !r.Resumed || r.Epoch != 3 || r.Session.HomeNode != "n2" || !r.Session.Connected || r.Session.DetachedAt != 0 {
		t.Fatalf("resume result %+v", r)
	}
	if !slices.Equal(r.OwnedAgents, []string{"a1", "a2"}) || len(r.Reclaimed) != 2 {
		t.Fatalf("owned %v reclaimed %v", r.OwnedAgents, r.Reclaimed)
	}
	a2, _ = h.s.Agent("a2")
	if a2.State != StateBusy || a2.OwnerID != "p1" || a2.HomeNode != "n2" || a2.Lifecycle.OrphanedAt != 0 {
		t.Fatalf("reclaimed agent %+v", a2)
	}
	got := types(h.s.EventsAfter(last, 0))
	want := []string{EventParticipantConnected, EventAgentStateChanged, EventAgentStateChanged}
	if !slices.Equal(got, want) {
		t.Fatalf("resume events %v", got)
	}
	// The old connection's late detach (epoch 1) no longer applies.
	if d := h.must(cSessionDetach, detach("s1", 1, 0)).(DetachResult); d.Applied {
		t.Fatal("stale detach after resume applied")
	}
	if s, _ := h.s.Session("s1"); !s.Connected {
		t.Fatal("session detached by a stale command")
	}
}

func TestState_SessionReclaimAgents(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0))
	h.must(cSessionOpen, openSession("s3", "p3", "", 0))
	h.must(cAgentRegister, register("a1", inSession("s1", "p1")))
	h.must(cAgentRegister, register("other", inSession("s3", "p3")))
	h.must(cSessionDetach, detach("s1", 1, 0))

	open := openSession("s2", "p2", "", 0)
	open.ReclaimAgents = []string{"a1", "ghost", "other"}
	res := h.must(cSessionOpen, open).(SessionResult)
	if len(res.Reclaimed) != 1 || res.Reclaimed[0].ID != "a1" || res.Reclaimed[0].OwnerID != "p2" {
		t.Fatalf("reclaimed %+v", res.Reclaimed)
	}
	if !slices.Equal(res.NotReclaimed, []string{"ghost", "other"}) || !slices.Equal(res.OwnedAgents, []string{"a1"}) {
		t.Fatalf("not reclaimed %v owned %v", res.NotReclaimed, res.OwnedAgents)
	}
	if a, _ := h.s.Agent("a1"); a.State != StateRegistered || a.SessionID != "s2" {
		t.Fatalf("agent %+v", a)
	}
}

func TestState_DisconnectPolicies(t *testing.T) {
	cases := []struct {
		behavior   string
		wantAgents int // agents left right after detach
		wantState  string
	}{
		{"", 0, ""},
		{BehaviorUnregister, 0, ""},
		{BehaviorOrphan, 1, StateOrphaned},
		{BehaviorGracePeriod, 1, StateOrphaned},
	}
	for _, tc := range cases {
		t.Run("behavior="+tc.behavior, func(t *testing.T) {
			h := newHarness(t, 100)
			h.must(cSessionOpen, openSession("s1", "p1", tc.behavior, 5_000))
			h.must(cAgentRegister, register("a1", inSession("s1", "p1")))
			_, last := h.s.Window()
			h.must(cSessionDetach, detach("s1", 1, 0))
			if n := len(h.s.Agents()); n != tc.wantAgents {
				t.Fatalf("%d agents after detach, want %d", n, tc.wantAgents)
			}
			evs := h.s.EventsAfter(last, 0)
			if evs[0].Type != EventParticipantDisconnected {
				t.Fatalf("first event %s", evs[0].Type)
			}
			if tc.wantAgents == 0 {
				if evs[1].Type != EventAgentUnregistered || evs[1].CausedBy[0] != evs[0].ID {
					t.Fatalf("events %v", types(evs))
				}
				return
			}
			if a, _ := h.s.Agent("a1"); a.State != tc.wantState {
				t.Fatalf("state %q", a.State)
			}
			if evs[1].Type != EventAgentOrphaned {
				t.Fatalf("events %v", types(evs))
			}
		})
	}
}

func TestState_SessionExpire(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", BehaviorGracePeriod, 5_000))
	h.must(cAgentRegister, register("a1", inSession("s1", "p1")))
	h.must(cAgentRegister, register("a2", inSession("s1", "p1")))
	h.must(cSubAdd, &concordv1.SubscriptionAddRequest{Meta: meta(), Subscription: &concordv1.SubscriptionRecord{Id: "sub1", SessionId: "s1"}})
	h.must(cSessionDetach, detach("s1", 1, 60_000))
	sess, _ := h.s.Session("s1")
	at := sess.DetachedAt

	exp := h.s.Expiries()
	want := []Expiry{{"s1", 2, ExpireGrace, at + 5_000}, {"s1", 2, ExpireTTL, at + 60_000}}
	if !slices.Equal(exp, want) {
		t.Fatalf("expiries %+v, want %+v", exp, want)
	}
	// Someone reclaims a2 during the grace period: it survives the expiry.
	h.must(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a2", SetOwner: true, OwnerId: "p7", SessionId: "", HomeNode: "n3"})

	expire := func(ts int64, kind string, epoch uint64) DetachResult {
		return h.must(cSessionExpire, &concordv1.SessionExpireRequest{Meta: metaAt(ts), SessionId: "s1", Epoch: epoch, Kind: kind}).(DetachResult)
	}
	before := dump(h.s)
	if r := expire(at+4_999, ExpireGrace, 2); r.Applied {
		t.Fatal("grace expiry before the deadline applied")
	}
	if r := expire(at+6_000, ExpireGrace, 1); r.Applied {
		t.Fatal("expiry with a stale epoch applied")
	}
	if r := expire(at+10_000, ExpireTTL, 2); r.Applied {
		t.Fatal("ttl expiry before the deadline applied")
	}
	if dump(h.s) != before {
		t.Fatal("no-op expiries changed state")
	}
	r := expire(at+5_000, ExpireGrace, 2)
	if !r.Applied || !slices.Equal(r.Unregistered, []string{"a1"}) {
		t.Fatalf("grace expiry %+v", r)
	}
	if _, ok := h.s.Agent("a2"); !ok {
		t.Fatal("reclaimed agent unregistered by grace expiry")
	}
	if r := expire(at+5_001, ExpireGrace, 2); r.Applied {
		t.Fatal("grace expiry fired twice")
	}
	if exp := h.s.Expiries(); len(exp) != 1 || exp[0].Kind != ExpireTTL {
		t.Fatalf("expiries after grace %+v", exp)
	}
	if r := expire(at+60_000, ExpireTTL, 2); !r.Applied || !r.Removed {
		t.Fatalf("ttl expiry %+v", r)
	}
	if _, ok := h.s.Session("s1"); ok {
		t.Fatal("session not removed")
	}
	h.refuse(cSessionExpire, &concordv1.SessionExpireRequest{Meta: meta(), SessionId: "s1", Kind: "later"}, CodeInvalidParams)
	if r := expire(at+70_000, ExpireTTL, 2); r.Applied {
		t.Fatal("expiry of a removed session applied")
	}
}

func TestState_SessionClose(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0))
	h.must(cAgentRegister, register("a1", inSession("s1", "p1")))
	r := h.must(cSessionClose, &concordv1.SessionCloseRequest{Meta: meta(), SessionId: "s1", Epoch: 1, Reason: "bye", TtlMs: 1000}).(DetachResult)
	if !r.Applied || r.Session.ClosedAt == 0 || r.Session.Connected || !slices.Equal(r.Orphaned, []string{"a1"}) {
		t.Fatalf("close %+v", r)
	}
	// Closed sessions stay resumable until the TTL.
	res := h.must(cSessionOpen, resume("s1", "n1", "hash-s1")).(SessionResult)
	if res.Session.ClosedAt != 0 || !slices.Equal(res.OwnedAgents, []string{"a1"}) {
		t.Fatalf("resume after close %+v", res)
	}
}

// A detach names the node that lost the connection: it does not detach the
// session once it is homed elsewhere, even at the same epoch (a resume that
// never committed and a later one on another node both expect epoch+1).
func TestState_SessionDetachChecksHomeNode(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)) // epoch 1, on n1
	h.must(cAgentRegister, register("a1", inSession("s1", "p1")))
	other := detach("s1", 1, 60_000)
	other.HomeNode = "n2"
	if d := h.must(cSessionDetach, other).(DetachResult); d.Applied {
		t.Fatal("a detach from n2 applied to a session homed on n1")
	}
	if s, _ := h.s.Session("s1"); !s.Connected || s.HomeNode != "n1" {
		t.Fatalf("session after a foreign detach: %+v", s)
	}
	own := detach("s1", 1, 60_000)
	own.HomeNode = "n1"
	if d := h.must(cSessionDetach, own).(DetachResult); !d.Applied {
		t.Fatal("the home node's detach did not apply")
	}
}

func TestState_SpeakerAgent(t *testing.T) {
	h := newHarness(t, 100)
	for _, sid := range []string{"s-none", "s-one", "s-two", "s-named"} {
		h.must(cSessionOpen, openSession(sid, "p-"+sid, BehaviorOrphan, 0))
	}
	h.must(cAgentRegister, register("a1", inSession("s-one", "p-s-one")))
	h.must(cAgentRegister, register("b1", inSession("s-two", "p-s-two")))
	h.must(cAgentRegister, register("b2", inSession("s-two", "p-s-two")))
	h.must(cAgentRegister, register("c1", inSession("s-named", "p-s-named")))
	h.must(cAgentRegister, register("p-s-named", inSession("s-named", "p-s-named")))
	for _, tc := range []struct{ session, participant, want string }{
		{"s-none", "p-s-none", ""},
		{"s-one", "p-s-one", "a1"},
		{"s-two", "p-s-two", ""}, // ambiguous: the sender names no agent
		{"s-named", "p-s-named", "p-s-named"},
		{"s-missing", "p", ""},
	} {
		if got := h.s.SpeakerAgent(tc.session, tc.participant); got != tc.want {
			t.Errorf("SpeakerAgent(%s, %s) = %q, want %q", tc.session, tc.participant, got, tc.want)
		}
	}
	// An orphaned agent (no owner) no longer speaks for the session.
	h.must(cSessionDetach, detach("s-one", 1, 0))
	if got := h.s.SpeakerAgent("s-one", "p-s-one"); got != "" {
		t.Errorf("after detach with orphan policy: %q", got)
	}
}

// TestState_SessionChangesAndDetachedIndex: the moves counter changes only
// when an existing session is re-attached or detached by a node other
// than its home (the leader, for a node it saw fail), the detaches counter only when
// a session is stored detached, both on a snapshot restore, and Expiries
// and DueExpiries list exactly the detached sessions' deadlines.
func TestState_SessionChangesAndDetachedIndex(t *testing.T) {
	h := newHarness(t, 100)
	steps := []struct {
		name         string
		typ          T
		msg          func() proto.Message
		wantMoved    bool
		wantDetached bool
		wantExp      int
	}{
		{"open s1", cSessionOpen, func() proto.Message { return openSession("s1", "p1", BehaviorOrphan, 0) }, false, false, 0},
		{"open s2", cSessionOpen, func() proto.Message { return openSession("s2", "p2", BehaviorGracePeriod, 1_000) }, false, false, 0},
		{"agent in s2", cAgentRegister, func() proto.Message { return register("a2", inSession("s2", "p2")) }, false, false, 0},
		{"detach s2", cSessionDetach, func() proto.Message { return detach("s2", 1, 60_000) }, false, true, 2},
		{"detach s1", cSessionDetach, func() proto.Message { return detach("s1", 1, 0) }, false, true, 2},
		{"resume s2 elsewhere", cSessionOpen, func() proto.Message { return resume("s2", "n2", "hash-s2") }, true, false, 0},
		{"close s2", cSessionClose, func() proto.Message {
			return &concordv1.SessionCloseRequest{Meta: meta(), SessionId: "s2", Epoch: 3, Reason: "bye"}
		}, false, true, 1}, // its grace period still runs
		{"open s4 on n2", cSessionOpen, func() proto.Message {
			m := openSession("s4", "p4", BehaviorOrphan, 0)
			m.Session.HomeNode = "n2"
			return m
		}, false, false, 1},
		{"n2's own detach of s4", cSessionDetach, func() proto.Message {
			d := detach("s4", 1, 0)
			d.HomeNode, d.Meta.NodeId = "n2", "n2"
			return d
		}, false, true, 1},
		{"s4 resumed on n2", cSessionOpen, func() proto.Message { return resume("s4", "n2", "hash-s4") }, true, false, 1},
		{"leader (n1) detaches s4 of n2", cSessionDetach, func() proto.Message {
			d := detach("s4", 3, 0)
			d.HomeNode = "n2"
			return d
		}, true, true, 1},
	}
	for _, st := range steps {
		m0, d0 := h.s.SessionChanges()
		h.must(st.typ, st.msg())
		m1, d1 := h.s.SessionChanges()
		if moved, detached := m1 != m0, d1 != d0; moved != st.wantMoved || detached != st.wantDetached {
			t.Fatalf("%s: moves changed %v, detaches changed %v; want %v, %v", st.name, moved, detached, st.wantMoved, st.wantDetached)
		}
		exp := h.s.Expiries()
		if len(exp) != st.wantExp {
			t.Fatalf("%s: expiries %+v, want %d", st.name, exp, st.wantExp)
		}
		if len(exp) > 0 {
			if due := h.s.DueExpiries(exp[0].Deadline); !slices.Equal(due, exp[:1]) {
				t.Fatalf("%s: due at the first deadline %+v, want %+v", st.name, due, exp[:1])
			}
			if due := h.s.DueExpiries(exp[0].Deadline - 1); len(due) != 0 {
				t.Fatalf("%s: due before the first deadline %+v", st.name, due)
			}
		}
	}

	// A restore may move any session, and rebuilds the detached index.
	h.must(cSessionOpen, openSession("s3", "p3", BehaviorOrphan, 0))
	h.must(cSessionDetach, detach("s3", 1, 30_000))
	want := h.s.Expiries()
	restored := newHarness(t, 100)
	m0, d0 := restored.s.SessionChanges()
	commit, err := restored.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if m1, d1 := restored.s.SessionChanges(); m1 == m0 || d1 == d0 {
		t.Fatal("restore left a session counter unchanged")
	}
	if got := restored.s.Expiries(); len(want) != 2 || !slices.Equal(got, want) {
		t.Fatalf("restored expiries %+v, want %+v", got, want)
	}
}

// TestState_DueExpiries_AgentlessAndShortcut: a detached session without
// agents has no grace expiry to propose, only its TTL; DueExpiries answers
// from the earliest deadline of its last walk while nothing changed, and a
// change (a detach with an earlier deadline, an agent's grace to run)
// makes it walk again.
func TestState_DueExpiries_AgentlessAndShortcut(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("idle", "p1", BehaviorGracePeriod, 1_000))
	h.must(cSessionDetach, detach("idle", 1, 60_000))
	sess, _ := h.s.Session("idle")
	at := sess.DetachedAt
	if exp := h.s.Expiries(); len(exp) != 1 || exp[0].Kind != ExpireTTL || exp[0].Deadline != at+60_000 {
		t.Fatalf("expiries of a session without agents %+v, want its TTL only", exp)
	}
	if due := h.s.DueExpiries(at + 59_999); len(due) != 0 {
		t.Fatalf("due before the TTL: %+v", due)
	}
	// The walk above saw the TTL as the earliest deadline; a session
	// detached since with an earlier one is found all the same.
	h.must(cSessionOpen, openSession("busy", "p2", BehaviorGracePeriod, 1_000))
	h.must(cAgentRegister, register("a1", inSession("busy", "p2")))
	h.must(cSessionDetach, detach("busy", 1, 30_000))
	busy, _ := h.s.Session("busy")
	want := []Expiry{{"busy", 2, ExpireGrace, busy.DetachedAt + 1_000}}
	if due := h.s.DueExpiries(busy.DetachedAt + 1_000); !slices.Equal(due, want) {
		t.Fatalf("due at the new grace deadline %+v, want %+v", due, want)
	}
	// Nothing changed: the same answer, and nothing before the deadline.
	if due := h.s.DueExpiries(busy.DetachedAt + 1_000); !slices.Equal(due, want) {
		t.Fatalf("due again %+v, want %+v", due, want)
	}
	if due := h.s.DueExpiries(busy.DetachedAt + 999); len(due) != 0 {
		t.Fatalf("due before every deadline: %+v", due)
	}
	all := h.s.DueExpiries(at + 60_000)
	if len(all) != 3 {
		t.Fatalf("due at the last deadline %+v, want the grace and both TTLs", all)
	}
}
