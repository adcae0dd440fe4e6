package registry

import (
	"slices"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestState_Scopes(t *testing.T) {
	h := newHarness(t, 100)
	sc := h.must(cScopeCreate, scope("root", func(r *concordv1.ScopeRecord) { r.Metadata = []byte(`{"a":1}`) })).(Scope)
	if sc.ID != "root" || !sc.Persistent || string(sc.Metadata) != `{"a":1}` {
		t.Fatalf("created %+v", sc)
	}
	h.must(cScopeCreate, scope("child", func(r *concordv1.ScopeRecord) { r.Parent = "root" }))
	h.refuse(cScopeCreate, scope("root"), CodeInvalidParams)
	h.refuse(cScopeCreate, scope(""), CodeInvalidParams)
	h.refuse(cScopeCreate, scope("x", func(r *concordv1.ScopeRecord) { r.Parent = "nope" }), CodeScopeNotFound)
	h.refuse(cScopeCreate, scope("x", func(r *concordv1.ScopeRecord) { r.Parent = "x" }), CodeInvalidParams)

	h.must(cAgentRegister, register("a1"))
	join := func(s, a string) *concordv1.ScopeJoinRequest {
		return &concordv1.ScopeJoinRequest{Meta: meta(), ScopeId: s, AgentId: a}
	}
	leave := func(s, a string) *concordv1.ScopeLeaveRequest {
		return &concordv1.ScopeLeaveRequest{Meta: meta(), ScopeId: s, AgentId: a}
	}
	_, last := h.s.Window()
	r := h.must(cScopeJoin, join("child", "a1")).(MembershipResult)
	if !r.Changed || !slices.Equal(r.Scope.Members, []string{"a1"}) || !slices.Equal(r.Agent.Scopes, []string{"child"}) {
		t.Fatalf("join %+v", r)
	}
	if r := h.must(cScopeJoin, join("child", "a1")).(MembershipResult); r.Changed {
		t.Fatal("second join changed")
	}
	if got := types(h.s.EventsAfter(last, 0)); !slices.Equal(got, []string{EventScopeMemberJoined}) {
		t.Fatalf("events %v", got)
	}
	h.refuse(cScopeJoin, join("nope", "a1"), CodeScopeNotFound)
	h.refuse(cScopeJoin, join("child", "nope"), CodeAgentNotFound)
	h.refuse(cScopeLeave, leave("nope", "a1"), CodeScopeNotFound)
	h.refuse(cScopeLeave, leave("child", "nope"), CodeAgentNotFound)

	h.refuse(cScopeDelete, &concordv1.ScopeDeleteRequest{Meta: meta(), ScopeId: "root"}, CodeInvalidRequest)
	h.refuse(cScopeDelete, &concordv1.ScopeDeleteRequest{Meta: meta(), ScopeId: "nope"}, CodeScopeNotFound)
	del := h.must(cScopeDelete, &concordv1.ScopeDeleteRequest{Meta: meta(), ScopeId: "child"}).(Scope)
	if del.ID != "child" {
		t.Fatalf("deleted %+v", del)
	}
	if a, _ := h.s.Agent("a1"); len(a.Scopes) != 0 {
		t.Fatalf("agent still lists deleted scope: %v", a.Scopes)
	}

	h.must(cScopeCreate, scope("auto", func(r *concordv1.ScopeRecord) { r.AutoDelete = true }))
	h.must(cScopeJoin, join("auto", "a1"))
	if r := h.must(cScopeLeave, leave("root", "a1")).(MembershipResult); r.Changed {
		t.Fatal("leave of a non-member changed")
	}
	_, last = h.s.Window()
	r = h.must(cScopeLeave, leave("auto", "a1")).(MembershipResult)
	if !r.Changed || !r.ScopeDeleted || len(r.Agent.Scopes) != 0 {
		t.Fatalf("leave %+v", r)
	}
	if got := types(h.s.EventsAfter(last, 0)); !slices.Equal(got, []string{EventScopeMemberLeft, EventScopeDeleted}) {
		t.Fatalf("events %v", got)
	}
}

func TestState_Subscriptions(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", "", 0))
	add := func(id string) *concordv1.SubscriptionAddRequest {
		return &concordv1.SubscriptionAddRequest{Meta: meta(), Subscription: &concordv1.SubscriptionRecord{
			Id: id, SessionId: "s1", Filter: []byte(`{"eventTypes":["agent_registered"]}`)}}
	}
	sub := h.must(cSubAdd, add("b")).(Subscription)
	if sub.CreatedAt == 0 || string(sub.Filter) == "" {
		t.Fatalf("sub %+v", sub)
	}
	h.must(cSubAdd, add("a"))
	h.refuse(cSubAdd, add("a"), CodeInvalidParams)
	h.refuse(cSubAdd, add(""), CodeInvalidParams)
	bad := add("c")
	bad.Subscription.SessionId = "nope"
	h.refuse(cSubAdd, bad, CodeInvalidRequest)
	s, _ := h.s.Session("s1")
	if len(s.Subscriptions) != 2 || s.Subscriptions[0].ID != "a" {
		t.Fatalf("subscriptions not ordered: %+v", s.Subscriptions)
	}

	cur := func(c ...*concordv1.SubscriptionCursor) *concordv1.SubscriptionCursorRequest {
		return &concordv1.SubscriptionCursorRequest{Meta: meta(), Cursors: c}
	}
	n := h.must(cSubCursor, cur(
		&concordv1.SubscriptionCursor{SessionId: "s1", SubscriptionId: "a", EventId: "e5", Seq: 5},
		&concordv1.SubscriptionCursor{SessionId: "s1", SubscriptionId: "gone", EventId: "e1", Seq: 1},
		&concordv1.SubscriptionCursor{SessionId: "nope", SubscriptionId: "a", EventId: "e1", Seq: 1},
	)).(int)
	if n != 1 {
		t.Fatalf("moved %d", n)
	}
	if n := h.must(cSubCursor, cur(&concordv1.SubscriptionCursor{SessionId: "s1", SubscriptionId: "a", EventId: "e3", Seq: 3})).(int); n != 0 {
		t.Fatal("cursor moved backwards")
	}
	s, _ = h.s.Session("s1")
	if s.Subscriptions[0].CursorSeq != 5 || s.Subscriptions[0].CursorEventID != "e5" {
		t.Fatalf("cursor %+v", s.Subscriptions[0])
	}

	rm := h.must(cSubRemove, &concordv1.SubscriptionRemoveRequest{Meta: meta(), SessionId: "s1", SubscriptionId: "a"}).(Subscription)
	if rm.ID != "a" || rm.CursorSeq != 5 {
		t.Fatalf("removed %+v", rm)
	}
	h.refuse(cSubRemove, &concordv1.SubscriptionRemoveRequest{Meta: meta(), SessionId: "s1", SubscriptionId: "a"}, CodeInvalidParams)
	h.refuse(cSubRemove, &concordv1.SubscriptionRemoveRequest{Meta: meta(), SessionId: "x", SubscriptionId: "b"}, CodeInvalidRequest)
	if _, last := h.s.Window(); last != 1 {
		t.Fatalf("subscription commands emitted events (last=%d)", last)
	}
}
