package registry

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestState_AgentRegister(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cScopeCreate, scope("s1"))
	h.must(cScopeCreate, scope("auto", func(r *concordv1.ScopeRecord) { r.AutoJoinRoles = []string{"worker"} }))
	h.must(cSessionOpen, openSession("sess1", "p1", "", 0))

	res := h.must(cAgentRegister, register("a1", inSession("sess1", "p1"), func(r *concordv1.AgentRecord) {
		r.Scopes = []string{"s1", "s1"}
		r.Role = "worker"
		r.Metadata = []byte(`{"k":1}`)
	})).(RegisterResult)
	a := res.Agent
	if a.ID != "a1" || a.State != StateRegistered || a.OwnerID != "p1" || a.SessionID != "sess1" || a.HomeNode != "n1" {
		t.Fatalf("unexpected agent %+v", a)
	}
	if !slices.Equal(a.Scopes, []string{"auto", "s1"}) {
		t.Fatalf("scopes = %v, want auto-joined [auto s1]", a.Scopes)
	}
	if a.Lifecycle.CreatedAt != tsNow || string(a.Metadata) != `{"k":1}` {
		t.Fatalf("lifecycle/metadata not recorded: %+v", a)
	}
	sc, _ := h.s.Scope("s1")
	if !slices.Equal(sc.Members, []string{"a1"}) {
		t.Fatalf("members = %v", sc.Members)
	}
	evs := h.s.EventsAfter(0, 0)
	got := types(evs)
	want := []string{EventScopeCreated, EventScopeCreated, EventParticipantConnected, EventAgentRegistered, EventScopeMemberJoined, EventScopeMemberJoined}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	reg := evs[3]
	if !slices.Equal(reg.AgentIDs, []string{"a1"}) || !slices.Equal(reg.ScopeIDs, []string{"auto", "s1"}) {
		t.Fatalf("subjects %v %v", reg.AgentIDs, reg.ScopeIDs)
	}
	var data struct {
		Agent map[string]any `json:"agent"`
	}
	if err := json.Unmarshal(reg.Data, &data); err != nil || data.Agent["id"] != "a1" {
		t.Fatalf("agent_registered data %s (%v)", reg.Data, err)
	}
	if evs[4].CausedBy[0] != reg.ID {
		t.Fatalf("member joined not caused by registration")
	}

	h.must(cAgentRegister, register("child", func(r *concordv1.AgentRecord) { r.Parent = "a1"; r.State = StateActive }))
	if c, _ := h.s.Agent("child"); c.Lifecycle.StartedAt == 0 {
		t.Fatalf("active at registration must set startedAt")
	}
	if ch := h.s.Children("a1"); len(ch) != 1 || ch[0].ID != "child" {
		t.Fatalf("children %v", ch)
	}

	cases := []struct {
		name string
		msg  *concordv1.AgentRegisterRequest
		code int
	}{
		{"duplicate of another owner", register("a1", inSession("", "p2")), CodeAgentExists},
		{"missing id", register(""), CodeInvalidParams},
		{"unknown parent", register("x", func(r *concordv1.AgentRecord) { r.Parent = "nope" }), CodeAgentNotFound},
		{"unknown scope", register("x", func(r *concordv1.AgentRecord) { r.Scopes = []string{"s1", "nope"} }), CodeScopeNotFound},
		{"bad state", register("x", func(r *concordv1.AgentRecord) { r.State = "dancing" }), CodeStateInvalid},
		{"orphaned state", register("x", func(r *concordv1.AgentRecord) { r.State = StateOrphaned }), CodeStateInvalid},
		{"unknown session", register("x", inSession("nope", "p1")), CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			h.refuse(cAgentRegister, tc.msg, tc.code)
		})
	}
}

func TestState_AgentRegisterExisting(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0))
	h.must(cSessionOpen, openSession("s2", "p1", BehaviorOrphan, 0))
	h.must(cSessionOpen, openSession("s3", "p3", BehaviorOrphan, 0))
	h.must(cAgentRegister, register("a1", inSession("s1", "p1")))

	// Same session again (the SDK's register after a resume): the existing
	// agent, unchanged, and no event.
	_, last := h.s.Window()
	again := register("a1", inSession("s1", "p1"), func(r *concordv1.AgentRecord) { r.Name = "other name" })
	res := h.must(cAgentRegister, again).(RegisterResult)
	if !res.Existing || res.Agent.Name != "agent a1" {
		t.Fatalf("re-register %+v", res)
	}
	if _, l := h.s.Window(); l != last {
		t.Fatal("idempotent register emitted events")
	}
	// Same participant, new session: the agent moves.
	res = h.must(cAgentRegister, register("a1", inSession("s2", "p1"))).(RegisterResult)
	if !res.Existing || res.Agent.SessionID != "s2" || res.PreviousSessionID != "s1" {
		t.Fatalf("move %+v", res)
	}
	// Another participant: refused while owned.
	h.refuse(cAgentRegister, register("a1", inSession("s3", "p3")), CodeAgentExists)
	// Orphaned by p1's session: p3 still cannot take it, p1 can.
	h.must(cSessionDetach, detach("s2", 1, 0))
	h.refuse(cAgentRegister, register("a1", inSession("s3", "p3")), CodeAgentExists)
	res = h.must(cAgentRegister, register("a1", inSession("s1", "p1"))).(RegisterResult)
	if !res.Resumed || res.Agent.State != StateRegistered || res.Agent.OwnerID != "p1" {
		t.Fatalf("reclaim %+v", res)
	}
	// Orphan whose session is gone: a new participant may register it.
	h.must(cSessionDetach, detach("s1", 1, 1))
	h.must(cSessionExpire, &concordv1.SessionExpireRequest{Meta: metaAt(tsNow + 1000), SessionId: "s1", Epoch: 2, Kind: ExpireTTL})
	res = h.must(cAgentRegister, register("a1", inSession("s3", "p3"))).(RegisterResult)
	if !res.Resumed || res.Agent.OwnerID != "p3" {
		t.Fatalf("register of an abandoned orphan %+v", res)
	}

	// resumePersistentIdentity reclaims an orphan with the same persistent id.
	h.must(cSessionOpen, openSession("s4", "p4", BehaviorOrphan, 0))
	pr := register("pa", inSession("s4", "p4"))
	pr.PersistentId = "pid-1"
	h.must(cAgentRegister, pr)
	h.must(cSessionDetach, detach("s4", 1, 0))
	pr = register("new-id", inSession("s3", "p3"))
	pr.PersistentId, pr.ResumePersistentIdentity = "pid-1", true
	res = h.must(cAgentRegister, pr).(RegisterResult)
	if !res.Resumed || res.Agent.ID != "pa" || res.PreviousSessionID != "s4" || res.Agent.OwnerID != "p3" {
		t.Fatalf("persistent identity resume %+v", res)
	}
}

func TestState_AgentUnregister(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cScopeCreate, scope("keep"))
	h.must(cScopeCreate, scope("tmp", func(r *concordv1.ScopeRecord) { r.AutoDelete = true }))
	h.must(cAgentRegister, register("a1", func(r *concordv1.AgentRecord) { r.Scopes = []string{"keep", "tmp"} }))
	_, last := h.s.Window()

	res := h.must(cAgentUnregister, &concordv1.AgentUnregisterRequest{Meta: meta(), AgentId: "a1", Reason: "done"}).(Agent)
	if res.ID != "a1" {
		t.Fatalf("result %+v", res)
	}
	if _, ok := h.s.Agent("a1"); ok {
		t.Fatal("agent still present")
	}
	if sc, _ := h.s.Scope("keep"); len(sc.Members) != 0 {
		t.Fatalf("keep members %v", sc.Members)
	}
	if _, ok := h.s.Scope("tmp"); ok {
		t.Fatal("autoDelete scope not deleted when emptied")
	}
	got := types(h.s.EventsAfter(last, 0))
	want := []string{EventAgentUnregistered, EventScopeMemberLeft, EventScopeMemberLeft, EventScopeDeleted}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if ev := h.s.EventsAfter(last, 1)[0]; !strings.Contains(string(ev.Data), `"reason":"done"`) {
		t.Fatalf("unregistered data %s", ev.Data)
	}
	h.refuse(cAgentUnregister, &concordv1.AgentUnregisterRequest{Meta: meta(), AgentId: "a1"}, CodeAgentNotFound)
}

func TestState_AgentLifecycleTransitions(t *testing.T) {
	cases := []struct {
		name  string
		steps []string // verbs applied in order
		want  []string // resulting state after each step; "" = refused (3001)
	}{
		{"conformance pack", []string{"suspend", "resume", "stop"}, []string{StateSuspended, StateIdle, StateStopped}},
		{"double suspend", []string{"suspend", "suspend"}, []string{StateSuspended, ""}},
		{"resume not suspended", []string{"resume"}, []string{""}},
		{"stop twice", []string{"stop", "stop"}, []string{StateStopped, ""}},
		{"suspend stopped", []string{"stop", "suspend"}, []string{StateStopped, ""}},
		{"stop suspended", []string{"suspend", "stop"}, []string{StateSuspended, StateStopped}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 100)
			h.must(cAgentRegister, register("a1"))
			for i, verb := range tc.steps {
				if tc.want[i] == "" {
					h.refuse(cAgentUpdate, transition("a1", verb), CodeStateInvalid)
					continue
				}
				_, last := h.s.Window()
				a := h.must(cAgentUpdate, transition("a1", verb)).(Agent)
				if a.State != tc.want[i] {
					t.Fatalf("step %d %s: state %q, want %q", i, verb, a.State, tc.want[i])
				}
				evs := h.s.EventsAfter(last, 0)
				if len(evs) != 1 || evs[0].Type != EventAgentStateChanged {
					t.Fatalf("events %v", types(evs))
				}
			}
		})
	}
	h := newHarness(t, 100)
	h.must(cAgentRegister, register("a1"))
	h.refuse(cAgentUpdate, transition("a1", "explode"), CodeInvalidParams)
	h.refuse(cAgentUpdate, transition("nope", "stop"), CodeAgentNotFound)
	stop := transition("a1", "stop")
	stop.Reason = "finished"
	a := h.must(cAgentUpdate, stop).(Agent)
	if a.Lifecycle.StoppedAt == 0 || a.Lifecycle.ExitReason != "finished" {
		t.Fatalf("stop lifecycle %+v", a.Lifecycle)
	}
}

func TestState_AgentUpdateFields(t *testing.T) {
	h := newHarness(t, 100)
	h.must(cSessionOpen, openSession("s2", "p2", "", 0))
	h.must(cAgentRegister, register("a1", func(r *concordv1.AgentRecord) { r.Environment = []byte(`{"os":{"type":"linux"}}`) }))
	_, last := h.s.Window()
	st := StateBusy
	name := "renamed"
	up := &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", State: &st, Name: &name,
		Metadata: []byte(`{"v":2}`), Environment: []byte(`{"os":{"type":"mac"}}`)}
	a := h.must(cAgentUpdate, up).(Agent)
	if a.State != StateBusy || a.Name != "renamed" || string(a.Metadata) != `{"v":2}` || a.Lifecycle.StartedAt == 0 {
		t.Fatalf("update not applied: %+v", a)
	}
	if got := types(h.s.EventsAfter(last, 0)); !slices.Equal(got, []string{EventAgentStateChanged, EventAgentEnvironmentChanged}) {
		t.Fatalf("events %v", got)
	}
	// Metadata-only update: no event.
	_, last = h.s.Window()
	h.must(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", Metadata: []byte(`{"v":3}`)})
	if evs := h.s.EventsAfter(last, 0); len(evs) != 0 {
		t.Fatalf("metadata update emitted %v", types(evs))
	}
	// Ownership change (re-home).
	a = h.must(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", SetOwner: true,
		OwnerId: "p2", SessionId: "s2", HomeNode: "n9"}).(Agent)
	if a.OwnerID != "p2" || a.SessionID != "s2" || a.HomeNode != "n9" {
		t.Fatalf("owner not changed: %+v", a)
	}

	bad := StateOrphaned
	h.refuse(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", State: &bad}, CodeStateInvalid)
	h.refuse(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", State: &st, Transition: "stop"}, CodeInvalidParams)
	h.refuse(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", SetOwner: true, OwnerId: "p3", SessionId: "nope"}, CodeInvalidRequest)
	h.must(cAgentUpdate, transition("a1", "stop"))
	h.refuse(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", State: &st}, CodeStateInvalid)
	custom := "x-thinking"
	h.refuse(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", State: &custom}, CodeStateInvalid)
}

func TestAgent_MarshalJSONOwnerNull(t *testing.T) {
	b, err := json.Marshal(Agent{ID: "a", State: StateOrphaned})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ownerId":null`) || strings.Contains(string(b), "SessionID") {
		t.Fatalf("json %s", b)
	}
	b, _ = json.Marshal(Agent{ID: "a", State: StateIdle, OwnerID: "p"})
	if !strings.Contains(string(b), `"ownerId":"p"`) {
		t.Fatalf("json %s", b)
	}
}
