package registry

import (
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// roundTrip encodes r for t and decodes it back, failing when the codec
// declines.
func roundTrip(t *testing.T, s *State, typ T, r raftstore.Result) raftstore.Result {
	t.Helper()
	b, ok := s.EncodeResult(typ, r)
	if !ok {
		t.Fatalf("%v: EncodeResult declined %#v", typ, r)
	}
	got, err := s.DecodeResult(typ, b)
	if err != nil {
		t.Fatalf("%v: DecodeResult: %v", typ, err)
	}
	return got
}

// sameResult compares two outcomes as a MAP answer would show them (the
// JSON of the value, the error's code, message and field) and as Go values
// up to nil versus empty slices.
func sameResult(t *testing.T, typ T, want, got raftstore.Result) {
	t.Helper()
	if (want.Err == nil) != (got.Err == nil) {
		t.Fatalf("%v: error %v, want %v", typ, got.Err, want.Err)
	}
	if want.Err != nil {
		if !reflect.DeepEqual(want.Err, got.Err) || got.Err.Error() != want.Err.Error() {
			t.Fatalf("%v: error %#v, want %#v", typ, got.Err, want.Err)
		}
		return
	}
	wj, _ := json.Marshal(want.Value)
	gj, _ := json.Marshal(got.Value)
	if string(wj) != string(gj) {
		t.Fatalf("%v: JSON\n got %s\nwant %s", typ, gj, wj)
	}
	if !reflect.DeepEqual(normalise(want.Value), normalise(got.Value)) {
		t.Fatalf("%v: value\n got %#v\nwant %#v", typ, got.Value, want.Value)
	}
}

// normalise maps empty slices and raw JSON to nil (the protobuf records,
// like the snapshot, keep no difference between them).
func normalise(v any) any {
	rv := reflect.New(reflect.TypeOf(v)).Elem()
	rv.Set(reflect.ValueOf(v))
	normaliseValue(rv)
	return rv.Interface()
}

func normaliseValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				normaliseValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := range c.Len() {
			normaliseValue(c.Index(i))
		}
		v.Set(c)
	}
}

func TestResultCodec_RoundTrip(t *testing.T) {
	h := newHarness(t, 64)
	withParent := func(r *concordv1.AgentRecord) {
		r.Parent, r.Scopes, r.Metadata = "a1", []string{"x"}, []byte(`{"k":1}`)
		r.PersistentIdentity = []byte(`{"persistentId":"p-1"}`)
	}
	steps := []struct {
		name string
		typ  T
		msg  proto.Message
	}{
		{"open", cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)},
		{"register", cAgentRegister, register("a1", inSession("s1", "p1"))},
		{"register child", cAgentRegister, register("a2", inSession("s1", "p1"), withParent)},
		{"register existing id", cAgentRegister, register("a1", inSession("s1", "p1"))},
		{"update", cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "a1", Metadata: []byte(`{"v":2}`)}},
		{"update unknown", cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: meta(), AgentId: "nope"}},
		{"stop", cAgentUpdate, transition("a2", TransitionStop)},
		{"resume stopped", cAgentUpdate, transition("a2", TransitionResume)},
		{"scope create", cScopeCreate, scope("sc1", func(r *concordv1.ScopeRecord) { r.AutoJoinRoles = []string{"r"} })},
		{"scope create again", cScopeCreate, scope("sc1")},
		{"join", cScopeJoin, &concordv1.ScopeJoinRequest{Meta: meta(), ScopeId: "sc1", AgentId: "a1"}},
		{"join again", cScopeJoin, &concordv1.ScopeJoinRequest{Meta: meta(), ScopeId: "sc1", AgentId: "a1"}},
		{"leave", cScopeLeave, &concordv1.ScopeLeaveRequest{Meta: meta(), ScopeId: "sc1", AgentId: "a1"}},
		{"join unknown scope", cScopeJoin, &concordv1.ScopeJoinRequest{Meta: meta(), ScopeId: "nope", AgentId: "a1"}},
		{"detach", cSessionDetach, &concordv1.SessionDetachRequest{Meta: meta(), SessionId: "s1", Epoch: 1, TtlMs: 60_000}},
		{"stale detach", cSessionDetach, &concordv1.SessionDetachRequest{Meta: meta(), SessionId: "s1", Epoch: 1}},
		{"resume", cSessionOpen, &concordv1.SessionOpenRequest{Meta: meta(), Resume: true, ReclaimAgents: []string{"a1", "zz"},
			Session: &concordv1.SessionRecord{Id: "s1", HomeNode: "n2"}}},
		{"open duplicate", cSessionOpen, openSession("s1", "p1", BehaviorOrphan, 0)},
		{"unregister", cAgentUnregister, &concordv1.AgentUnregisterRequest{Meta: meta(), AgentId: "a2", Reason: "done"}},
		{"scope delete", cScopeDelete, &concordv1.ScopeDeleteRequest{Meta: meta(), ScopeId: "sc1"}},
		{"close", cSessionClose, &concordv1.SessionCloseRequest{Meta: meta(), SessionId: "s1", Epoch: 3, TtlMs: 1}},
		{"expire", cSessionExpire, &concordv1.SessionExpireRequest{Meta: metaAt(1 << 50), SessionId: "s1", Epoch: 4, Kind: ExpireTTL}},
	}
	var values, errs int
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			v, err := h.apply(st.typ, st.msg)
			want := raftstore.Result{Value: v, Err: err}
			if err != nil {
				errs++
			} else {
				values++
			}
			sameResult(t, st.typ, want, roundTrip(t, h.s, st.typ, want))
		})
	}
	if values == 0 || errs == 0 {
		t.Fatalf("the table covers %d values and %d errors; want both", values, errs)
	}
}

// TestResultCodec_RandomWorkload round-trips the outcome of every command
// of the mixed workload the determinism test uses.
func TestResultCodec_RandomWorkload(t *testing.T) {
	h := newHarness(t, 64)
	covered := map[T]bool{}
	for _, st := range randomCommands(7, 600) {
		v, err := h.apply(st.typ, st.msg)
		r := raftstore.Result{Value: v, Err: err}
		if _, ok := resultKinds[st.typ]; !ok {
			if _, ok := h.s.EncodeResult(st.typ, r); ok {
				t.Fatalf("%v has no codec but EncodeResult accepted it", st.typ)
			}
			continue
		}
		covered[st.typ] = true
		sameResult(t, st.typ, r, roundTrip(t, h.s, st.typ, r))
	}
	if len(covered) < len(resultKinds)-2 {
		t.Fatalf("workload covered %d of %d coded types", len(covered), len(resultKinds))
	}
}

func TestResultCodec_Declines(t *testing.T) {
	h := newHarness(t, 64)
	for _, tc := range []struct {
		name string
		typ  T
		r    raftstore.Result
	}{
		{"type without codec", cSubAdd, raftstore.Result{Value: Subscription{ID: "x"}}},
		{"cursor count", cSubCursor, raftstore.Result{Value: 3}},
		{"wrapped error", cAgentUpdate, raftstore.Result{Err: wrapErr(ErrAgentNotFound)}},
		{"value of another type", cAgentUpdate, raftstore.Result{Value: Scope{ID: "s"}}},
		{"nil value", cScopeCreate, raftstore.Result{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, ok := h.s.EncodeResult(tc.typ, tc.r); ok {
				t.Fatalf("EncodeResult = %x, true; want a decline", b)
			}
		})
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func wrapErr(err error) error { return wrapped{err} }

func TestResultCodec_DecodeRefuses(t *testing.T) {
	h := newHarness(t, 64)
	enc := func(m *concordv1.RegistryResult) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		typ  T
		data []byte
	}{
		{"not protobuf", cAgentUpdate, []byte{0xff, 0xff, 0xff}},
		{"no agent", cAgentUpdate, enc(&concordv1.RegistryResult{})},
		{"no session", cSessionOpen, enc(&concordv1.RegistryResult{Agent: &concordv1.AgentRecord{Id: "a"}})},
		{"membership without agent", cScopeJoin, enc(&concordv1.RegistryResult{Scope: &concordv1.ScopeRecord{Id: "s"}})},
		{"error without code", cAgentUpdate, enc(&concordv1.RegistryResult{Error: &concordv1.RegistryError{Message: "m"}})},
		{"type without codec", cSubAdd, enc(&concordv1.RegistryResult{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := h.s.DecodeResult(tc.typ, tc.data); err == nil {
				t.Fatalf("DecodeResult = %#v, nil; want an error", r)
			}
		})
	}
}

// FuzzDecodeResult: the bytes come from another process; any input
// decodes to a well-formed outcome or an error, and a decoded outcome
// encodes and decodes to itself.
func FuzzDecodeResult(f *testing.F) {
	s, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	seed := func(typ T, r raftstore.Result) {
		if b, ok := s.EncodeResult(typ, r); ok {
			f.Add(uint8(typ), b)
		}
	}
	seed(cAgentUpdate, raftstore.Result{Value: Agent{ID: "a", Scopes: []string{"x"}, Metadata: json.RawMessage(`{}`)}})
	seed(cAgentRegister, raftstore.Result{Value: RegisterResult{Agent: Agent{ID: "a"}, Resumed: true, PreviousSessionID: "s0"}})
	seed(cSessionOpen, raftstore.Result{Value: SessionResult{Session: Session{ID: "s", Subscriptions: []Subscription{{ID: "sub"}}},
		Epoch: 2, Reclaimed: []Agent{{ID: "a"}}, OwnedAgents: []string{"a"}}})
	seed(cSessionDetach, raftstore.Result{Value: DetachResult{Applied: true, Orphaned: []string{"a"}}})
	seed(cScopeJoin, raftstore.Result{Value: MembershipResult{Scope: Scope{ID: "s"}, Agent: Agent{ID: "a"}, Changed: true}})
	seed(cAgentUpdate, raftstore.Result{Err: agentNotFound("a")})
	f.Add(uint8(cAgentUpdate), []byte{})
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		ct := T(typ)
		r, err := s.DecodeResult(ct, data)
		if err != nil {
			return
		}
		if _, ok := resultKinds[ct]; !ok {
			t.Fatalf("decoded a result for %v, which has no codec", ct)
		}
		if r.Err == nil && r.Value == nil {
			t.Fatal("decoded neither a value nor an error")
		}
		sameResult(t, ct, r, roundTrip(t, s, ct, r))
	})
}
