package consensus

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTasks_ContentsAndStickyKeys(t *testing.T) {
	req := mustRequest(t, `{"requestId":"r","task":"T","participants":[{"id":"a","role":"lead"},{"id":"b"},{"id":"c"}],
	 "sessionPolicy":{"sessionKeyPrefix":"px"},"peerContextPolicy":{"maxCharsPerPeerResponse":200,"maxPeersPerRound":1,"overflowStrategy":"truncate-middle"},
	 "promptPolicy":{"debateTemplate":"DEBATE!"},"constraints":{"language":"fr"},"context":{"k":"v"}}`)
	h := newHarness(t, req)
	if !reflect.DeepEqual(h.order, []string{"sid/r0/a", "sid/r0/b", "sid/r0/c"}) {
		t.Fatalf("initial task ids = %v", h.order)
	}
	t0 := h.tasks["sid/r0/a"]
	if t0.RoundMetadata.ParticipantSessionKey != "px:sid:a" || *t0.RoundMetadata.Role != "lead" ||
		t0.RoundMetadata.OutputSchema.Ref != "argue.round.initial.output-content.v1" || t0.SessionID != "sid" {
		t.Errorf("metadata = %+v", t0.RoundMetadata)
	}
	if !strings.Contains(t0.Prompt, "language=fr") || len(t0.PeerRoundInputs) != 0 || len(t0.ClaimCatalog) != 0 {
		t.Errorf("initial task = %+v", t0)
	}
	for _, id := range []string{"sid/r0/a", "sid/r0/b", "sid/r0/c"} {
		h.answer(id, out(id, map[string]any{"taskTitle": "x", "fullResponse": strings.Repeat("é", 150) + "🙂" + strings.Repeat("z", 100),
			"extractedClaims": []any{claim("C " + id)}}))
	}
	b := h.tasks["sid/r1/b"]
	if b == nil || b.Prompt != "DEBATE!" || b.RoundMetadata.OutputSchema.Ref != "argue.round.debate.output-content.v1" {
		t.Fatalf("debate task = %+v", b)
	}
	if len(b.PeerRoundInputs) != 1 || b.PeerRoundInputs[0].ParticipantID != "a" || !b.PeerRoundInputs[0].Truncated {
		t.Fatalf("peers = %+v", b.PeerRoundInputs)
	}
	if p := b.PeerRoundInputs[0].FullResponse; utf16Len(p) > 200 || !strings.Contains(p, "…") || !strings.HasSuffix(p, "z") {
		t.Errorf("truncate-middle = %q (%d units)", p, utf16Len(p))
	}
	js, err := json.Marshal(b)
	if err != nil || !strings.Contains(string(js), `"selfHistoryRef":{"stickySession":true}`) || !strings.Contains(string(js), `"context":{"k":"v"}`) {
		t.Errorf("task JSON = %s (%v)", js, err)
	}
}

func TestTruncation(t *testing.T) {
	s := strings.Repeat("a", 250)
	got, cut := truncateTail(s, 200)
	if !cut || utf16Len(got) != 200 || !strings.HasSuffix(got, "…") {
		t.Errorf("tail = %d units", utf16Len(got))
	}
	got, cut = truncateMiddle(s[:100]+strings.Repeat("b", 150), 200)
	if !cut || utf16Len(got) != 200 || got[:99] != strings.Repeat("a", 99) || !strings.HasSuffix(got, "b") {
		t.Errorf("middle = %q", got)
	}
	if got, cut := truncateTail("short", 200); cut || got != "short" {
		t.Errorf("no cut expected")
	}
}

func TestText_JSRules(t *testing.T) {
	if n := utf16Len("a🙂é"); n != 4 {
		t.Errorf("utf16Len = %d", n)
	}
	if got := jsTrim("\u00a0\ufeff x \u2003\n"); got != "x" {
		t.Errorf("jsTrim = %q", got)
	}
	if got := jsTrim("\u0085x"); got != "\u0085x" {
		t.Errorf("U+0085 is not JS whitespace, got %q", got)
	}
	for in, want := range map[float64]float64{68.3345: 68.33, 0.125: 0.13, 86.075: 86.08, 1.005: 1, 99.995: 100} {
		if got := round2(in); got != want {
			t.Errorf("round2(%v) = %v, want %v", in, got, want)
		}
	}
	if got := collapseSpace("  a \n\t b  "); got != "a b" {
		t.Errorf("collapseSpace = %q", got)
	}
}

func threeReq(t *testing.T, extra string) *Request {
	return mustRequest(t, `{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"},{"id":"c"}]`+extra+`}`)
}

func TestOutput_BoundToDispatchedTask(t *testing.T) {
	bad := map[string]Answer{
		"other participant": out("x", map[string]any{"participantId": "b", "taskTitle": "t"}),
		"wrong phase":       out("x", map[string]any{"phase": "debate", "taskTitle": "t"}),
		"wrong round":       out("x", map[string]any{"round": 1, "taskTitle": "t"}),
		"missing title":     out("x", nil),
		"votes in initial":  out("x", map[string]any{"taskTitle": "t", "claimVotes": []any{v("a", "accept")}}),
		"long title":        out("x", map[string]any{"taskTitle": strings.Repeat("t", 61)}),
		"bad stance":        out("x", map[string]any{"taskTitle": "t", "judgements": []any{j("c1", "maybe")}}),
		"bad category":      out("x", map[string]any{"taskTitle": "t", "extractedClaims": []any{map[string]any{"title": "a", "statement": "b", "category": "x"}}}),
		"confidence > 1":    out("x", map[string]any{"taskTitle": "t", "judgements": []any{map[string]any{"claimId": "c", "stance": "agree", "confidence": 2, "rationale": "r"}}}),
		"wrong kind":        {Raw: []byte(`{"kind":"report","output":{}}`)},
		"not json":          {Raw: []byte(`{"kind":`)},
		"invalid utf8":      {Raw: []byte("{\"kind\":\"round\",\"output\":{\"summary\":\"\xff\"}}")},
		"huge":              {Raw: append([]byte(`{"kind":"round","output":{"fullResponse":"`), []byte(strings.Repeat("a", MaxOutputBytes))...)},
		"null":              {Raw: []byte(`null`)},
	}
	for name, ans := range bad {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, threeReq(t, ""))
			h.answer("sid/r0/a", ans)
			ev := h.lastEvent(EventParticipantEliminated)
			if ev == nil {
				t.Fatalf("no elimination; events %v", h.eventTypes())
			}
			p := ev.Payload.(*ParticipantEliminatedPayload)
			if p.ParticipantID != "a" || p.Reason != ReasonError || !strings.HasPrefix(p.Error, invalidResult) {
				t.Errorf("elimination = %+v", p)
			}
			if h.s.isActive("a") || h.s.eliminations[0].Reason != "error" {
				t.Errorf("a still active")
			}
		})
	}
	t.Run("extra fields are dropped", func(t *testing.T) {
		h := newHarness(t, threeReq(t, ""))
		h.answer("sid/r0/a", out("a", map[string]any{"taskTitle": "t", "surprise": map[string]any{"x": 1}}))
		if h.lastEvent(EventParticipantResponded) == nil || !h.s.isActive("a") {
			t.Errorf("extra key rejected: %v", h.eventTypes())
		}
	})
}

func TestStep_IgnoredInputs(t *testing.T) {
	h := newHarness(t, threeReq(t, ""))
	cases := map[string]Input{
		"unknown task":  TaskResult(h.now, "sid/r9/a", "a", nil),
		"wrong sender":  TaskResult(h.now, "sid/r0/a", "b", []byte(`{}`)),
		"timer not due": TimerFired(h.now+1, "sid/r0#timer"),
		"stale timer":   TimerFired(h.now, "nope"),
		"no deadline":   TimerFired(h.now+1e9, "sid#deadline"),
		"second start":  Start(h.now, "sid", threeReq(t, "")),
		"unknown kind":  {Kind: 99, At: h.now},
	}
	for name, in := range cases {
		before := EncodeState(h.s)
		if err := h.step(in); !errors.Is(err, ErrIgnored) {
			t.Errorf("%s: err = %v, want ignored", name, err)
		}
		if !reflect.DeepEqual(before, EncodeState(h.s)) {
			t.Errorf("%s changed the state", name)
		}
	}
	h.answer("sid/r0/a", out("a", map[string]any{"taskTitle": "t"}))
	if err := h.answer("sid/r0/a", out("a", map[string]any{"taskTitle": "t"})); !errors.Is(err, ErrIgnored) {
		t.Errorf("settled task accepted again: %v", err)
	}
	if _, _, err := NewState(TimerFired(1, "x")); !errors.Is(err, ErrNoRun) {
		t.Errorf("NewState(non-start input) = %v", err)
	}
	var none *State
	if _, err := none.Apply(TimerFired(1, "x")); !errors.Is(err, ErrNoRun) {
		t.Errorf("no-state input = %v", err)
	}
	if _, err := h.s.Apply(Start(1, "sid", threeReq(t, ""))); !errors.Is(err, ErrIgnored) {
		t.Errorf("second start = %v", err)
	}
}

func TestClaims_SeedsWhenNoneProposed(t *testing.T) {
	h := newHarness(t, threeReq(t, ""))
	for _, id := range []string{"sid/r0/a", "sid/r0/b", "sid/r0/c"} {
		h.answer(id, out(id, map[string]any{"taskTitle": "t", "summary": "sum " + id}))
	}
	got := h.s.catalog
	if len(got) != 3 || got[1].ClaimID != "seed:b:0" || got[1].Title != "Seed from b" || got[1].Statement != "sum sid/r0/b" || got[1].Category != "todo" {
		t.Errorf("seeds = %+v", got)
	}
	rc := h.lastEvent(EventRoundCompleted).Payload.(*RoundCompletedPayload)
	if rc.NewClaims != 3 || rc.ClaimCatalogSize != 3 {
		t.Errorf("round completed = %+v", rc)
	}
}

func TestClaims_MergeChainsRevisionsAndLog(t *testing.T) {
	s := &State{req: threeReq(t, "")}
	s.rebuildIndex()
	outs := []*Output{
		{ParticipantID: "a", ExtractedClaims: []ExtractedClaim{{Title: "A0", Statement: "s"}, {Title: "A1", Statement: "s"}}},
		{ParticipantID: "b", ExtractedClaims: []ExtractedClaim{{Title: "B0", Statement: "s"}}},
	}
	s.applyClaimUpdate(outs, 0)
	rev := "revised"
	mw := func(id string) *string { return &id }
	round1 := []*Output{
		{ParticipantID: "c", Judgements: []Judgement{
			{ClaimID: "b:0:0", Stance: StanceAgree, MergesWith: mw("a:0:1")},   // b:0:0 -> a:0:1
			{ClaimID: "a:0:1", Stance: StanceRevise, MergesWith: mw("a:0:0")},  // a:0:1 -> a:0:0, chain collapses
			{ClaimID: "b:0:0", Stance: StanceDisagree, RevisedStatement: &rev}, // revises the merged claim itself
			{ClaimID: "zz", Stance: StanceAgree, MergesWith: mw("a:0:0")},      // unknown: no effect
			{ClaimID: "a:0:0", Stance: StanceAgree, RevisedStatement: &rev},    // agree: revision ignored
		}},
		{ParticipantID: "a", Judgements: []Judgement{{ClaimID: "a:0:0", Stance: StanceAgree, MergesWith: mw("a:0:1")}}},
	}
	n, merges := s.applyClaimUpdate(round1, 1)
	if n != 0 {
		t.Errorf("new claims = %d", n)
	}
	want := []AppliedMerge{
		{SourceClaimID: "a:0:1", TargetClaimID: "a:0:0", ParticipantIDs: []string{"a", "c"}},
		{SourceClaimID: "b:0:0", TargetClaimID: "a:0:1", ParticipantIDs: []string{"c"}},
	}
	if !reflect.DeepEqual(merges, want) {
		t.Errorf("merges = %+v", merges)
	}
	c := s.catalog
	if c[2].MergedInto != "a:0:0" || c[1].MergedInto != "a:0:0" || c[2].Statement != "revised" || c[0].Statement != "s" {
		t.Errorf("catalog = %+v", c)
	}
	if !reflect.DeepEqual(c[0].ProposedBy, []string{"a", "b"}) {
		t.Errorf("survivor owners = %v", c[0].ProposedBy)
	}
	// A later round re-stating the merge does not log it again.
	if _, m := s.applyClaimUpdate([]*Output{{ParticipantID: "b", Judgements: []Judgement{{ClaimID: "a:0:1", Stance: StanceAgree, MergesWith: mw("a:0:0")}}}}, 2); len(m) != 0 {
		t.Errorf("replayed merge logged: %+v", m)
	}
}

// The claims of one output share one proposedBy slice: a merge into one of
// them must not change the other's owners.
func TestClaims_SharedOwnersStayPerClaim(t *testing.T) {
	s := &State{req: threeReq(t, "")}
	s.rebuildIndex()
	s.applyClaimUpdate([]*Output{
		{ParticipantID: "a", ExtractedClaims: []ExtractedClaim{{Title: "A0", Statement: "s"}, {Title: "A1", Statement: "s"}}},
		{ParticipantID: "b", ExtractedClaims: []ExtractedClaim{{Title: "B0", Statement: "s"}}},
	}, 0)
	mw := "a:0:1"
	s.applyClaimUpdate([]*Output{{ParticipantID: "c", Judgements: []Judgement{
		{ClaimID: "b:0:0", Stance: StanceAgree, MergesWith: &mw}}}}, 1)
	c := s.catalog
	if !reflect.DeepEqual(c[1].ProposedBy, []string{"a", "b"}) || !reflect.DeepEqual(c[0].ProposedBy, []string{"a"}) {
		t.Errorf("owners = %v, %v, want [a b] for the survivor and [a] for its sibling", c[1].ProposedBy, c[0].ProposedBy)
	}
}

func TestClaims_IDCollisionKeepsBoth(t *testing.T) {
	s := &State{req: threeReq(t, "")}
	s.rebuildIndex()
	s.appendClaim(&Claim{ClaimID: "seed:1:0"})
	s.applyClaimUpdate([]*Output{{ParticipantID: "seed", Round: 1, ExtractedClaims: []ExtractedClaim{{Title: "t", Statement: "s"}}}}, 1)
	if len(s.catalog) != 2 || s.catalog[1].ClaimID != "seed:1:0#2" {
		t.Errorf("catalog = %+v", s.catalog)
	}
}

// A task catalog shares the state's catalog until an edit: the edit moves
// the state to a private copy, so a dispatched task keeps what it showed.
func TestClaims_SharedCatalogIsCopiedOnEdit(t *testing.T) {
	s := &State{req: threeReq(t, "")}
	s.rebuildIndex()
	s.applyClaimUpdate([]*Output{{ParticipantID: "a", ExtractedClaims: []ExtractedClaim{
		{Title: "A0", Statement: "s"}, {Title: "A1", Statement: "s"}}}}, 0)
	shown := s.taskCatalog(PhaseDebate)
	if &shown[0] != &s.catalog[0] {
		t.Fatal("catalog without merges is not shared")
	}
	s.applyClaimUpdate([]*Output{{ParticipantID: "b", ExtractedClaims: []ExtractedClaim{{Title: "B0", Statement: "s"}}}}, 1)
	if len(shown) != 2 || cap(shown) != 2 {
		t.Fatalf("an append reached the shared slice: %d/%d", len(shown), cap(shown))
	}
	rev, into := "revised", "a:0:0"
	s.applyClaimUpdate([]*Output{{ParticipantID: "c", Judgements: []Judgement{
		{ClaimID: "a:0:0", Stance: StanceRevise, RevisedStatement: &rev},
		{ClaimID: "a:0:1", Stance: StanceAgree, MergesWith: &into}}}}, 2)
	if shown[0].Statement != "s" || shown[1].Status != ClaimActive || len(shown[0].ProposedBy) != 1 {
		t.Fatalf("an edit reached a dispatched catalog: %+v", shown)
	}
	if s.catalog[0].Statement != "revised" || s.catalog[1].Status != ClaimMerged {
		t.Fatalf("edit lost: %+v", s.catalog)
	}
	if got := s.taskCatalog(PhaseDebate); len(got) != 2 || got[1].ClaimID != "b:1:0" {
		t.Fatalf("active catalog after a merge = %+v", got)
	}
}
