package consensus

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestFlow_MaxRoundsWithoutEarlyStop(t *testing.T) {
	// A standing objection prevents early stop, so all maxRounds run.
	object := out("c", map[string]any{"judgements": []any{j("a:0:0", "disagree")}})
	s := &Script{Version: 1, Persona: true, Agents: map[string]map[string]Answer{"c": {"debate": object}}}
	run := runScript(t, threeReq(t, `,"roundPolicy":{"minRounds":0,"maxRounds":3}`), s)
	res := run.Result
	if res.Metrics.TotalRounds != 5 || res.Metrics.EarlyStopTriggered || res.Rounds[4].Round != 4 {
		t.Errorf("metrics = %+v, last round %d", res.Metrics, res.Rounds[4].Round)
	}
	if res.Metrics.TotalTurns != 15 {
		t.Errorf("turns = %d", res.Metrics.TotalTurns)
	}
}

func TestFlow_EarlyStopRespectsMinRounds(t *testing.T) {
	agree := func(who string) Answer {
		return out(who, map[string]any{"judgements": []any{j("a:0:0", "agree")}})
	}
	s := &Script{Version: 1, Persona: true, Agents: map[string]map[string]Answer{
		"a": {"debate": agree("a")}, "b": {"debate": agree("b")}, "c": {"debate": agree("c")}}}
	for minRounds, wantTotal := range map[int]int{0: 3, 1: 3, 2: 4} {
		run := runScript(t, threeReq(t, fmt.Sprintf(`,"roundPolicy":{"minRounds":%d,"maxRounds":3}`, minRounds)), s)
		if got := run.Result.Metrics.TotalRounds; got != wantTotal || !run.Result.Metrics.EarlyStopTriggered {
			t.Errorf("minRounds %d: totalRounds %d early %v, want %d", minRounds, got, run.Result.Metrics.EarlyStopTriggered, wantTotal)
		}
	}
}

func TestFlow_RoundTimerSettlesPendingAsTimeout(t *testing.T) {
	h := newHarness(t, threeReq(t, `,"waitingPolicy":{"perTaskTimeoutMs":60000,"perRoundTimeoutMs":5000}`))
	if h.timers["sid/r0#timer"] != 6000 || h.timers["sid/r0/a"] != 61000 {
		t.Fatalf("timers = %v", h.timers)
	}
	h.answer("sid/r0/a", out("a", map[string]any{"taskTitle": "t"}))
	h.now = 6000
	h.step(TimerFired(6000, "sid/r0#timer"))
	var elim []string
	for _, e := range h.events {
		if p, ok := e.Payload.(*ParticipantEliminatedPayload); ok {
			elim = append(elim, p.ParticipantID+":"+p.Error)
		}
	}
	if !reflect.DeepEqual(elim, []string{"b:__round_timeout__", "c:__round_timeout__"}) {
		t.Errorf("eliminations = %v", elim)
	}
	if h.s.waitTimeouts != 2 || !h.s.interrupted {
		t.Errorf("waitTimeouts %d interrupted %v", h.s.waitTimeouts, h.s.interrupted)
	}
	// Interrupted after the initial round: final vote is round 1 with the survivor.
	if !reflect.DeepEqual(h.pending(), []string{"sid/r1/a"}) || h.tasks["sid/r1/a"].Phase != PhaseFinalVote {
		t.Fatalf("pending = %v", h.pending())
	}
	h.answer("sid/r1/a", out("a", map[string]any{"claimVotes": []any{v("seed:a:0", "accept")}}))
	res := h.result()
	if res.Status != StatusInterrupted || res.Error == nil || res.Error.Code != "INSUFFICIENT_PARTICIPANTS" ||
		res.Error.Message != "Discussion interrupted after initial round: active=1, required=2" {
		t.Errorf("result status %s error %+v", res.Status, res.Error)
	}
	if h.lastEvent(EventSessionInterrupted) == nil {
		t.Errorf("no SessionInterrupted: %v", h.eventTypes())
	}
}

func TestFlow_PerTaskTimerEliminates(t *testing.T) {
	h := newHarness(t, threeReq(t, `,"waitingPolicy":{"perTaskTimeoutMs":2000}`))
	if err := h.step(TimerFired(2999, "sid/r0/b")); err == nil {
		t.Fatalf("early task timer accepted")
	}
	h.step(TimerFired(3000, "sid/r0/b"))
	if h.s.isActive("b") || h.s.eliminations[0].Reason != ReasonTimeout {
		t.Errorf("b not eliminated for timeout: %+v", h.s.eliminations)
	}
	var cancelled bool
	for _, e := range h.fx {
		cancelled = cancelled || e == Effect(CancelTask{TaskID: "sid/r0/b"})
	}
	if !cancelled {
		t.Errorf("timed-out task not cancelled: %+v", h.fx)
	}
}

func TestFlow_InsufficientParticipantsFail(t *testing.T) {
	h := newHarness(t, threeReq(t, `,"participantsPolicy":{"minParticipants":3,"onInsufficientParticipants":"fail"}`))
	h.step(TaskFailed(h.now, "sid/r0/c", "c", FailError, "boom"))
	h.answer("sid/r0/a", out("a", map[string]any{"taskTitle": "t"}))
	h.answer("sid/r0/b", out("b", map[string]any{"taskTitle": "t"}))
	if h.fin == nil || h.fin.Failure == nil || h.fin.Result != nil {
		t.Fatalf("finish = %+v", h.fin)
	}
	want := "Round failed minimum participant requirement after initial round: completed=2, required=3"
	if h.fin.Failure.Message != want || h.s.Lifecycle() != LifeFailed {
		t.Errorf("failure = %+v", h.fin.Failure)
	}
	types := h.eventTypes()
	if types[len(types)-1] != EventFailed || types[len(types)-2] != EventRoundCompleted {
		t.Errorf("events = %v", types)
	}
	if err := h.step(Cancel(h.now, "late")); err == nil {
		t.Errorf("input after failure accepted")
	}
}

func TestFlow_DispatchFailureFailsRun(t *testing.T) {
	h := newHarness(t, threeReq(t, ""))
	h.step(TaskFailed(h.now, "sid/r0/a", "a", FailDispatch, "no route"))
	if h.fin == nil || h.fin.Failure == nil || !strings.Contains(h.fin.Failure.Message, "no route") {
		t.Errorf("finish = %+v", h.fin)
	}
}

func TestFlow_GlobalDeadline(t *testing.T) {
	h := newHarness(t, threeReq(t, `,"waitingPolicy":{"globalDeadlineMs":3000,"perRoundTimeoutMs":10000}`))
	if h.timers["sid/r0#timer"] != 4000 || h.timers["sid#deadline"] != 4000 {
		t.Fatalf("timers = %v", h.timers)
	}
	h.answer("sid/r0/a", out("a", map[string]any{"taskTitle": "t", "extractedClaims": []any{claim("A")}}))
	h.now = 4000
	h.step(TimerFired(4000, "sid#deadline"))
	// b and c time out; a alone is below minParticipants -> interrupted, and
	// the deadline then blocks the final vote.
	if !h.s.deadlineHit || h.fin == nil {
		t.Fatalf("deadline not hit: %v", h.eventTypes())
	}
	res := h.result()
	if res.Status != StatusInterrupted || !res.Metrics.GlobalDeadlineHit || res.Metrics.TotalRounds != 1 {
		t.Errorf("result %s %+v", res.Status, res.Metrics)
	}
	if g := h.lastEvent(EventGlobalDeadlineHit).Payload.(*GlobalDeadlinePayload); g.Round != 1 || g.GlobalDeadlineMs != 3000 {
		t.Errorf("deadline payload = %+v", g)
	}
	for _, r := range res.ClaimResolutions {
		if r.Status != "unresolved" {
			t.Errorf("resolution not forced unresolved: %+v", r)
		}
	}
}

func TestFlow_DeadlineBeforeFinalVote(t *testing.T) {
	h := newHarness(t, threeReq(t, `,"roundPolicy":{"minRounds":0,"maxRounds":1},"waitingPolicy":{"globalDeadlineMs":3000}`))
	h.personaRound()
	h.now = 4500 // answers of round 1 arrive after the deadline
	h.personaRound()
	res := h.result()
	if res.Status != StatusUnresolved || res.Metrics.TotalRounds != 2 || !res.Metrics.GlobalDeadlineHit {
		t.Errorf("status %s metrics %+v", res.Status, res.Metrics)
	}
	if g := h.lastEvent(EventGlobalDeadlineHit).Payload.(*GlobalDeadlinePayload); g.Round != 2 {
		t.Errorf("deadline round = %d, want 2 (the final vote)", g.Round)
	}
}

func TestVotes_EffectiveVotersAndDuplicates(t *testing.T) {
	s := workedExample()
	s.Agents["p2"]["final_vote"] = Answer{Timeout: true}
	run := runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 1)), s)
	for _, r := range run.Result.ClaimResolutions {
		if r.TotalVoters != 2 || r.Status != "resolved" {
			t.Errorf("resolution %+v, want 2/2 resolved", r)
		}
	}
	if run.Result.Status != StatusConsensus {
		t.Errorf("status = %s", run.Result.Status)
	}
	s = workedExample()
	s.Agents["p1"]["final_vote"] = out("p1", map[string]any{"claimVotes": []any{v("p1:0:0", "reject"),
		v("p1:0:0", "accept"), v("p3:0:0", "accept"), v("nope", "reject"), v("p2:0:0", "accept")}})
	run = runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 1)), s)
	r0 := run.Result.ClaimResolutions[0]
	if r0.AcceptCount != 2 || r0.RejectCount != 1 || r0.Votes[0].ParticipantID != "p1" || r0.Votes[0].Vote != "accept" {
		t.Errorf("duplicate vote handling: %+v", r0)
	}
	if len(run.Result.ClaimResolutions) != 2 {
		t.Errorf("votes on merged/unknown claims created resolutions: %+v", run.Result.ClaimResolutions)
	}
}

func TestRepresentative_TieBreakers(t *testing.T) {
	mk := func(tb string) *State {
		s := &State{req: threeReq(t, `,"scoringPolicy":{"tieBreaker":"`+tb+`"}`), active: []bool{true, true, true}}
		s.rounds = []RoundRecord{{Round: 1, Outputs: []*Output{
			{ParticipantID: "b", Round: 1, Judgements: []Judgement{{Stance: StanceDisagree}}},
			{ParticipantID: "c", Round: 1},
		}}}
		return s
	}
	board := []ParticipantScore{
		{ParticipantID: "b", Total: 80, ByRound: []RoundScore{{1, 90}}},
		{ParticipantID: "c", Total: 80, ByRound: []RoundScore{{1, 70}}},
		{ParticipantID: "a", Total: 10},
	}
	if r := mk(TieBreakLatestRound).pickRepresentative(board); r.ParticipantID != "b" || r.Reason != "tie-breaker" {
		t.Errorf("latest-round-score picked %+v", r)
	}
	if r := mk(TieBreakLeastObjection).pickRepresentative(board); r.ParticipantID != "c" || r.Reason != "tie-breaker" {
		t.Errorf("least-objection picked %+v", r)
	}
	s := mk(TieBreakLatestRound)
	s.req.ReportPolicy.RepresentativeID = "a"
	if r := s.pickRepresentative(board); r.ParticipantID != "a" || r.Reason != "host-designated" || r.Score != 10 ||
		r.Speech != "a has no available output." {
		t.Errorf("host-designated = %+v", r)
	}
	s.active = []bool{false, true, true}
	if r := s.pickRepresentative(board); r.Reason == "host-designated" {
		t.Errorf("inactive designated representative chosen: %+v", r)
	}
}

func TestTitle_Fallbacks(t *testing.T) {
	s := &State{req: threeReq(t, "")}
	s.req.Task = "   " + strings.Repeat("x", 70) + "  "
	if got := s.title("a", nil); utf16Len(got) != 60 || !strings.HasSuffix(got, "…") {
		t.Errorf("long title = %q", got)
	}
	s.req.Task = " \n "
	if got := s.title("a", nil); got != "Untitled argue session" {
		t.Errorf("empty title = %q", got)
	}
	s.rounds = []RoundRecord{{phase: PhaseInitial, Outputs: []*Output{{ParticipantID: "c", TaskTitle: "C's"}}}}
	if got := s.title("a", []ParticipantScore{{ParticipantID: "a"}, {ParticipantID: "c"}}); got != "C's" {
		t.Errorf("fallback title = %q", got)
	}
}
