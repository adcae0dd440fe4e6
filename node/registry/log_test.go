package registry

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

type step struct {
	typ T
	msg proto.Message
}

// randomCommands builds a reproducible mixed workload touching every
// command type, including ones that will be refused.
func randomCommands(seed int64, n int) []step {
	r := rand.New(rand.NewSource(seed))
	ts := int64(1_800_000_000_000)
	pick := func(prefix string, k int) string { return fmt.Sprintf("%s%d", prefix, r.Intn(k)) }
	var out []step
	for i := 0; i < n; i++ {
		ts += int64(r.Intn(2000))
		var ids []string
		for j := r.Intn(3); j > 0; j-- {
			ids = append(ids, ulid.MustNew(uint64(ts), rand.New(rand.NewSource(int64(i*7+j)))).String())
		}
		m := &concordv1.CommandMeta{TimestampMs: ts, EventIds: ids, NodeId: pick("n", 3), Source: pick("p", 3)}
		sid := pick("s", 4)
		switch r.Intn(13) {
		case 0, 1:
			out = append(out, step{cAgentRegister, &concordv1.AgentRegisterRequest{Meta: m, Agent: &concordv1.AgentRecord{
				Id: pick("a", 12), SessionId: sid, OwnerId: "p" + sid, Parent: []string{"", "a1"}[r.Intn(2)],
				Scopes: []string{pick("sc", 4)}[:r.Intn(2)], Role: pick("role", 2)}}})
		case 2:
			out = append(out, step{cAgentUnregister, &concordv1.AgentUnregisterRequest{Meta: m, AgentId: pick("a", 12)}})
		case 3:
			out = append(out, step{cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: m, AgentId: pick("a", 12),
				Transition: []string{"suspend", "resume", "stop", ""}[r.Intn(4)]}})
		case 4:
			out = append(out, step{cSessionOpen, &concordv1.SessionOpenRequest{Meta: m, Resume: r.Intn(2) == 0,
				ReclaimAgents: []string{pick("a", 12)},
				Session: &concordv1.SessionRecord{Id: sid, ParticipantId: "p" + sid, HomeNode: pick("n", 3),
					DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: []string{"", BehaviorOrphan, BehaviorGracePeriod}[r.Intn(3)], GracePeriodMs: 3000}}}})
		case 5:
			out = append(out, step{cSessionDetach, &concordv1.SessionDetachRequest{Meta: m, SessionId: sid, Epoch: uint64(r.Intn(4)), TtlMs: 10_000}})
		case 6:
			out = append(out, step{cSessionExpire, &concordv1.SessionExpireRequest{Meta: m, SessionId: sid, Epoch: uint64(r.Intn(4)),
				Kind: []string{ExpireGrace, ExpireTTL}[r.Intn(2)]}})
		case 7:
			out = append(out, step{cSessionClose, &concordv1.SessionCloseRequest{Meta: m, SessionId: sid, Epoch: uint64(r.Intn(4))}})
		case 8:
			out = append(out, step{cSubAdd, &concordv1.SubscriptionAddRequest{Meta: m, Subscription: &concordv1.SubscriptionRecord{Id: pick("sub", 3), SessionId: sid}}})
		case 9:
			out = append(out, step{cSubCursor, &concordv1.SubscriptionCursorRequest{Meta: m, Cursors: []*concordv1.SubscriptionCursor{
				{SessionId: sid, SubscriptionId: pick("sub", 3), Seq: uint64(r.Intn(50)), EventId: "e"}}}})
		case 10:
			out = append(out, step{cScopeCreate, &concordv1.ScopeCreateRequest{Meta: m, Scope: &concordv1.ScopeRecord{
				Id: pick("sc", 4), AutoDelete: r.Intn(2) == 0, AutoJoinRoles: []string{"role0"}}}})
		case 11:
			out = append(out, step{cScopeJoin, &concordv1.ScopeJoinRequest{Meta: m, ScopeId: pick("sc", 4), AgentId: pick("a", 12)}})
		case 12:
			if r.Intn(2) == 0 {
				out = append(out, step{cScopeLeave, &concordv1.ScopeLeaveRequest{Meta: m, ScopeId: pick("sc", 4), AgentId: pick("a", 12)}})
			} else {
				out = append(out, step{cScopeDelete, &concordv1.ScopeDeleteRequest{Meta: m, ScopeId: pick("sc", 4)}})
			}
		}
	}
	return out
}

func run(h *harness, steps []step) (applied, refused int) {
	defer checkSubsIndex(h.t, h.s)
	for _, st := range steps {
		checkErr := h.s.Check(st.typ, st.msg)
		_, err := h.apply(st.typ, st.msg)
		if (checkErr == nil) != (err == nil) {
			h.t.Fatalf("%v: Check said %v, Apply said %v", st.typ, checkErr, err)
		}
		if err != nil {
			var re *Error
			if !errors.As(err, &re) {
				h.t.Fatalf("non-domain error %v", err)
			}
			refused++
		} else {
			applied++
		}
	}
	return
}

func TestState_Determinism(t *testing.T) {
	steps := randomCommands(42, 600)
	a, b := newHarness(t, 100), newHarness(t, 100)
	applied, refused := run(a, steps)
	run(b, steps)
	if applied < 100 || refused < 50 {
		t.Fatalf("workload too one-sided: %d applied, %d refused", applied, refused)
	}
	if da, db := dump(a.s), dump(b.s); da != db {
		t.Fatal("two replicas fed the same commands diverged")
	}
	evs := a.s.EventsAfter(0, 0)
	oldest, last := a.s.Window()
	if len(evs) != 100 || evs[0].Position != oldest || evs[len(evs)-1].Position != last {
		t.Fatalf("window %d events, oldest %d last %d", len(evs), oldest, last)
	}
	seen := map[string]bool{}
	for i, ev := range evs {
		if i > 0 && ev.Position != evs[i-1].Position+1 {
			t.Fatalf("positions not dense at %d", i)
		}
		if _, err := ulid.ParseStrict(ev.ID); err != nil || seen[ev.ID] {
			t.Fatalf("bad or duplicate event id %q", ev.ID)
		}
		seen[ev.ID] = true
		if p, ok := a.s.PositionOf(ev.ID); !ok || p != ev.Position {
			t.Fatalf("PositionOf(%s) = %d %v", ev.ID, p, ok)
		}
	}
	types := map[string]bool{}
	for _, ev := range evs {
		types[ev.Type] = true
	}
	t.Logf("%d applied, %d refused, last position %d, event types %v", applied, refused, last, types)
}

func TestState_SnapshotRoundTrip(t *testing.T) {
	steps := randomCommands(7, 500)
	src := newHarness(t, 300)
	run(src, steps[:400])
	recs := snapshotBytes(t, src.s)

	dst := newHarness(t, 300)
	run(dst, randomCommands(99, 50)) // state to be replaced wholesale
	wake := dst.s.Notify()
	commit, err := dst.s.Restore(reader(recs))
	if err != nil {
		t.Fatal(err)
	}
	if dump(dst.s) == dump(src.s) {
		t.Fatal("Restore touched live state before commit")
	}
	commit()
	checkSubsIndex(t, dst.s)
	select {
	case <-wake:
	default:
		t.Fatal("restore did not wake Notify waiters")
	}
	if dump(dst.s) != dump(src.s) {
		t.Fatalf("restored state differs\nsrc %s\ndst %s", dump(src.s), dump(dst.s))
	}
	// Both continue identically from there (epochs, persistent ids and
	// orphan states included).
	dst.index = src.index
	run(src, steps[400:])
	run(dst, steps[400:])
	if dump(dst.s) != dump(src.s) {
		t.Fatal("replicas diverged after restore")
	}
}

func TestState_RestoreRejectsBadSnapshots(t *testing.T) {
	h := newHarness(t, 10)
	run(h, randomCommands(3, 100))
	good := snapshotBytes(t, h.s)
	cases := map[string][][]byte{
		"empty":      nil,
		"no header":  good[1:],
		"garbage":    {[]byte{0xff, 0xff, 0xff}},
		"gap":        append(slices.Clone(good[:len(good)-2]), good[len(good)-1]),
		"old format": append([][]byte{mustMarshal(t, &concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Header{Header: &concordv1.RegistryHeader{FormatVersion: 99}}})}, good[1:]...),
	}
	for name, recs := range cases {
		t.Run(name, func(t *testing.T) {
			before := dump(h.s)
			if _, err := h.s.Restore(reader(recs)); !errors.Is(err, ErrSnapshotFormat) {
				t.Fatalf("err %v", err)
			}
			if dump(h.s) != before {
				t.Fatal("failed restore changed state")
			}
		})
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestState_WindowPruning(t *testing.T) {
	h := newHarness(t, 3)
	var ids []string
	for i := 0; i < 5; i++ {
		id := ulid.MustNew(uint64(1000+i), rand.New(rand.NewSource(int64(i)))).String()
		ids = append(ids, id)
		h.must(cScopeCreate, &concordv1.ScopeCreateRequest{Meta: metaAt(int64(1000+i), id), Scope: &concordv1.ScopeRecord{Id: fmt.Sprint("s", i)}})
	}
	if oldest, last := h.s.Window(); oldest != 3 || last != 5 {
		t.Fatalf("window %d..%d, want 3..5", oldest, last)
	}
	for i, id := range ids {
		p, ok := h.s.PositionOf(id)
		if want := i >= 2; ok != want || (ok && p != uint64(i+1)) {
			t.Fatalf("PositionOf(event %d) = %d %v", i, p, ok)
		}
	}
	if _, ok := h.s.PositionOf("never"); ok {
		t.Fatal("unknown id found")
	}
	cases := []struct {
		pos, limit int
		want       []uint64
	}{
		{0, 0, []uint64{3, 4, 5}}, // aged-out start: from the oldest retained
		{3, 0, []uint64{4, 5}},
		{3, 1, []uint64{4}},
		{5, 0, nil},
		{9, 0, nil},
	}
	for _, tc := range cases {
		var got []uint64
		for _, ev := range h.s.EventsAfter(uint64(tc.pos), tc.limit) {
			got = append(got, ev.Position)
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("EventsAfter(%d,%d) = %v, want %v", tc.pos, tc.limit, got, tc.want)
		}
	}
	// A restored replica keeps the window and can still replay.
	dst := newHarness(t, 3)
	commit, err := dst.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if p, ok := dst.s.PositionOf(ids[4]); !ok || p != 5 {
		t.Fatalf("restored PositionOf = %d %v", p, ok)
	}
	// A smaller window on restore keeps only the newest events.
	small := newHarness(t, 2)
	commit, err = small.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if oldest, last := small.s.Window(); oldest != 4 || last != 5 {
		t.Fatalf("small window %d..%d", oldest, last)
	}
}

func TestState_EventIDs(t *testing.T) {
	h := newHarness(t, 100)
	// No ids supplied: derived from time and index, valid ULIDs.
	h.must(cScopeCreate, &concordv1.ScopeCreateRequest{Meta: metaAt(5000), Scope: &concordv1.ScopeRecord{Id: "a"}})
	ev := h.s.EventsAfter(0, 0)[0]
	u, err := ulid.ParseStrict(ev.ID)
	if err != nil || u.Time() != 5000 {
		t.Fatalf("derived id %q (%v)", ev.ID, err)
	}
	// The supplied id is reused by a later command: it must not collide.
	sup := ulid.MustNew(6000, rand.New(rand.NewSource(1))).String()
	h.must(cScopeCreate, &concordv1.ScopeCreateRequest{Meta: metaAt(6000, sup), Scope: &concordv1.ScopeRecord{Id: "b"}})
	h.must(cAgentRegister, &concordv1.AgentRegisterRequest{Meta: metaAt(6001, sup), Agent: &concordv1.AgentRecord{Id: "x", Scopes: []string{"a", "b"}}})
	evs := h.s.EventsAfter(1, 0)
	if evs[0].ID != sup {
		t.Fatalf("supplied id not used: %s", evs[0].ID)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.ID] {
			t.Fatalf("duplicate id %s", ev.ID)
		}
		seen[ev.ID] = true
	}
	if len(evs) != 4 {
		t.Fatalf("events %v", types(evs))
	}
}

func TestState_Notify(t *testing.T) {
	h := newHarness(t, 10)
	ch := h.s.Notify()
	h.refuse(cAgentUnregister, &concordv1.AgentUnregisterRequest{Meta: meta(), AgentId: "x"}, CodeAgentNotFound)
	h.must(cSubCursor, &concordv1.SubscriptionCursorRequest{Meta: meta()})
	select {
	case <-ch:
		t.Fatal("notified without an event")
	default:
	}
	h.must(cScopeCreate, scope("s"))
	select {
	case <-ch:
	default:
		t.Fatal("not notified after an event")
	}
	if h.s.Notify() == ch {
		t.Fatal("Notify returned the closed channel")
	}
}

// TestState_NotifyUntakenStaysOpen: a channel nobody took is kept across
// events (nobody can be waiting on it) and closed by the first event after
// someone takes it, whichever path appends (a command, AppendEvents, a
// restore).
func TestState_NotifyUntakenStaysOpen(t *testing.T) {
	h := newHarness(t, 10)
	ch := h.s.Notify()
	h.must(cScopeCreate, scope("a"))
	fresh := h.s.Notify()
	if fresh == ch {
		t.Fatal("Notify returned the closed channel")
	}
	// The channel is taken: a second call before an event returns it again.
	if h.s.Notify() != fresh {
		t.Fatal("Notify made a new channel without an event")
	}
	wakes := []func(){
		func() { h.must(cScopeCreate, scope("b")) },
		func() { h.s.AppendEvents(100, []Event{{Type: "run_started", Timestamp: 1}}) },
		func() {
			commit, err := h.s.Restore(reader(snapshotBytes(t, h.s)))
			if err != nil {
				t.Fatal(err)
			}
			commit()
		},
	}
	for i, wake := range wakes {
		ch := h.s.Notify()
		wake()
		select {
		case <-ch:
		default:
			t.Fatalf("wake %d: the taken channel was not closed", i)
		}
		// Untaken, the next channel survives events.
		untaken := h.s.notify
		h.must(cScopeCreate, scope(fmt.Sprintf("untaken-%d", i)))
		next := h.s.Notify()
		if next != untaken {
			t.Fatalf("wake %d: a channel nobody took was replaced", i)
		}
		h.must(cScopeCreate, scope(fmt.Sprintf("taken-%d", i)))
		select {
		case <-next:
		default:
			t.Fatalf("wake %d: the channel taken after untaken events was not closed", i)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if DefaultConfig().EventWindow != 10000 {
		t.Fatal("default window")
	}
	if _, err := New(Config{EventWindow: 0}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err %v", err)
	}
	s, _ := New(DefaultConfig())
	if s.Name() != "registry" || len(s.Handlers()) != 17 { // 14 MAP commands, the FSM level record, drain admit and release
		t.Fatalf("name %q handlers %d", s.Name(), len(s.Handlers()))
	}
}

func TestError_Is(t *testing.T) {
	err := error(agentNotFound("x"))
	if !errors.Is(err, ErrAgentNotFound) || errors.Is(err, ErrScopeNotFound) {
		t.Fatal("errors.Is by code")
	}
	if err.Error() == "" {
		t.Fatal("empty message")
	}
}

// FuzzRestore: arbitrary snapshot records never panic.
func FuzzRestore(f *testing.F) {
	h := newHarness(&testing.T{}, 10)
	run(h, randomCommands(5, 40))
	for _, rec := range snapshotBytes(&testing.T{}, h.s) {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _ := New(DefaultConfig())
		hdr := mustMarshal(t, &concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Header{Header: &concordv1.RegistryHeader{FormatVersion: snapshotFormat, LastPosition: 3}}})
		if commit, err := s.Restore(reader([][]byte{hdr, b})); err == nil {
			commit()
			_ = dump(s)
		}
	})
}

// checkSubsIndex compares the derived per-node subscription counts with a
// recount from the sessions, and HasSubscriptionsOn with both.
func checkSubsIndex(t *testing.T, s *State) {
	t.Helper()
	want := map[string]int{}
	for _, se := range s.Sessions() {
		if se.HomeNode != "" && len(se.Subscriptions) > 0 {
			want[se.HomeNode] += len(se.Subscriptions)
		}
	}
	s.mu.RLock()
	got := maps.Clone(s.d.subsOnNode)
	s.mu.RUnlock()
	if !maps.Equal(got, want) {
		t.Fatalf("subsOnNode = %v, recount from sessions = %v", got, want)
	}
	for _, n := range []string{"n1", "n2", "n3", ""} {
		if s.HasSubscriptionsOn(n) != (want[n] > 0) {
			t.Fatalf("HasSubscriptionsOn(%q) = %v with %d subscriptions there", n, !(want[n] > 0), want[n])
		}
	}
	checkConnectedIndex(t, s)
	checkAttachments(t, s)
}

// checkAttachments compares SessionAttachment with Session and
// SessionEpoch for every session and for an unknown one.
func checkAttachments(t *testing.T, s *State) {
	t.Helper()
	for _, se := range s.Sessions() {
		epoch, _ := s.SessionEpoch(se.ID)
		want := Attachment{Epoch: epoch, Connected: se.Connected, HomeNode: se.HomeNode, Closed: se.ClosedAt != 0}
		if got, ok := s.SessionAttachment(se.ID); !ok || got != want {
			t.Fatalf("SessionAttachment(%s) = %+v, %v; want %+v", se.ID, got, ok, want)
		}
	}
	if got, ok := s.SessionAttachment("no-such-session"); ok {
		t.Fatalf("SessionAttachment of an unknown session = %+v, true", got)
	}
}

// checkConnectedIndex compares ConnectedHomes and ConnectedSessionsOn
// with a recount from all the sessions.
func checkConnectedIndex(t *testing.T, s *State) {
	t.Helper()
	want := map[string][]string{}
	for _, se := range s.Sessions() {
		if se.Connected && se.HomeNode != "" {
			want[se.HomeNode] = append(want[se.HomeNode], se.ID)
		}
	}
	homes := s.ConnectedHomes()
	if got := slices.Sorted(maps.Keys(want)); !slices.Equal(homes, got) {
		t.Fatalf("ConnectedHomes = %v, recount from sessions = %v", homes, got)
	}
	for _, n := range append(homes, "nowhere") {
		var got []string
		for _, se := range s.ConnectedSessionsOn(n) {
			got = append(got, se.ID)
		}
		if !slices.Equal(got, want[n]) {
			t.Fatalf("ConnectedSessionsOn(%q) = %v, recount from sessions = %v", n, got, want[n])
		}
	}
}
