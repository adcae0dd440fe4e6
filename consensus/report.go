package consensus

import (
	"encoding/json"
	"strings"
)

var statusLabels = map[string]string{
	StatusConsensus:        "Consensus reached",
	StatusPartialConsensus: "Partial consensus",
	StatusUnresolved:       "Unresolved",
	StatusInterrupted:      "Discussion interrupted",
}

// builtinReport composes spec §15's builtin report.
func (s *State) builtinReport(v *runView) FinalReport {
	rp := s.req.ReportPolicy
	label, ok := statusLabels[v.status]
	if !ok {
		label = "Failed"
	}
	var last []*Output
	if n := len(s.rounds); n > 0 {
		last = s.rounds[n-1].Outputs
	}
	// One buffer of the longest possible size (collapsing never lengthens).
	size := len(label) + 1
	for _, o := range last {
		size += len("\n\n**") + len(o.ParticipantID) + len("**: ") + len(o.Summary)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(label)
	b.WriteString(".")
	for _, o := range last {
		b.WriteString("\n\n**")
		b.WriteString(o.ParticipantID)
		b.WriteString("**: ")
		writeCollapsed(&b, o.Summary)
	}
	r := FinalReport{Mode: ComposerBuiltin, TraceIncluded: rp.IncludeDeliberationTrace, TraceLevel: rp.TraceLevel,
		FinalSummary: b.String(), RepresentativeSpeech: v.rep.Speech}
	if rp.IncludeDeliberationTrace {
		r.OpinionShiftTimeline, r.RoundHighlights = s.trace(rp.TraceLevel)
		r.hasTimeline, r.hasHighlights = true, true
	}
	return r
}

// trace builds the opinion-shift timeline and round highlights. Rounds are
// recorded in increasing round order, so no sort is needed.
func (s *State) trace(level string) ([]OpinionShift, []RoundHighlight) {
	type key struct{ pid, claim string }
	last := map[key]string{}
	shifts := []OpinionShift{}
	highlights := []RoundHighlight{}
	limit := 140
	if level == TraceFull {
		limit = 280
	}
	for ri := range s.rounds {
		rec := &s.rounds[ri]
		for _, o := range rec.Outputs {
			for _, j := range o.Judgements {
				k := key{o.ParticipantID, j.ClaimID}
				prev, seen := last[k]
				if !seen || prev != j.Stance {
					from := prev
					if !seen {
						from = "unknown"
					}
					reason := j.Rationale
					shifts = append(shifts, OpinionShift{ClaimID: j.ClaimID, ParticipantID: o.ParticipantID,
						From: from, To: j.Stance, Round: rec.Round, Reason: &reason})
					last[k] = j.Stance
				}
			}
			sum, _ := truncateTail(o.Summary, limit)
			highlights = append(highlights, RoundHighlight{Round: rec.Round, ParticipantID: o.ParticipantID, Summary: sum})
		}
	}
	return shifts, highlights
}

// startReport dispatches the representative report task (§15).
func (st *stepper) startReport(v *runView) {
	s := st.s
	reporter := s.req.ReportPolicy.RepresentativeID
	if reporter == "" {
		reporter = v.rep.ParticipantID
	}
	st.emit(EventReportDispatched, &ReportDispatchedPayload{ReporterID: reporter, Composer: ComposerRepresentative}, st.at)
	t := &pendingTask{id: s.reportTaskID(reporter), pid: reporter, due: st.at + s.req.WaitingPolicy.PerTaskTimeoutMs}
	s.reportTask = t
	st.add(DispatchTask{Task: s.buildReportTask(t)})
	st.add(SetTimer{ID: t.id, Kind: TimerTask, At: t.due})
}

func (st *stepper) onReportResult(raw json.RawMessage) {
	s := st.s
	t := s.reportTask
	st.add(ClearTimer{ID: t.id})
	if isEmptyJSON(raw) {
		st.reportFallback(t.pid, "task_failed")
		return
	}
	rep, ok := decodeReport(raw)
	if !ok {
		st.reportFallback(t.pid, "parse_failed")
		return
	}
	rep.Mode = ComposerRepresentative
	s.report = rep
	s.reportTask = nil
	st.emit(EventReportCompleted, &ReportCompletedPayload{ReporterID: t.pid, Mode: ComposerRepresentative}, st.at)
	st.enterFinalizing()
}

func (st *stepper) onReportFailed(kind FailureKind) {
	st.add(ClearTimer{ID: st.s.reportTask.id})
	reason := "task_failed"
	switch kind {
	case FailDispatch:
		reason = "dispatch_failed"
	case FailAwait:
		reason = "await_failed"
	}
	st.reportFallback(st.s.reportTask.pid, reason)
}

// reportFallback uses the builtin report; report problems are never fatal.
func (st *stepper) reportFallback(reporter, reason string) {
	s := st.s
	s.reportTask = nil
	rep := s.builtinReport(s.view())
	s.report = &rep
	st.emit(EventReportCompleted, &ReportCompletedPayload{ReporterID: reporter, Mode: ComposerBuiltin, Reason: reason}, st.at)
	st.enterFinalizing()
}

// startAction runs the optional action step (§17).
func (st *stepper) startAction() {
	s := st.s
	ap := s.req.ActionPolicy
	actor := ap.ActorID
	if actor == "" {
		actor = s.view().rep.ParticipantID
	}
	if !s.isActive(actor) {
		st.emit(EventActionFailed, &ActionFailedPayload{ActorID: actor, Reason: "inactive_actor"}, st.at)
		s.action = &ActionOutput{ActorID: actor, Status: "failed", Error: "Actor " + actor + " is not an active participant"}
		st.finish()
		return
	}
	st.emit(EventActionDispatched, &ActionDispatchedPayload{ActorID: actor, Prompt: ap.Prompt}, st.at)
	t := &pendingTask{id: s.actionTaskID(actor), pid: actor, due: st.at + s.req.WaitingPolicy.PerTaskTimeoutMs}
	s.actionTask = t
	st.add(DispatchTask{Task: s.buildActionTask(t)})
	st.add(SetTimer{ID: t.id, Kind: TimerTask, At: t.due})
}

type actionEnvelope struct {
	Kind   *string `json:"kind"`
	Output *struct {
		FullResponse *string `json:"fullResponse"`
		Summary      *string `json:"summary"`
	} `json:"output"`
}

func (st *stepper) onActionResult(raw json.RawMessage) {
	s := st.s
	t := s.actionTask
	st.add(ClearTimer{ID: t.id})
	if isEmptyJSON(raw) {
		st.actionFailed("task_failed", "Action task failed")
		return
	}
	var env actionEnvelope
	if checkRaw(raw) != nil || json.Unmarshal(raw, &env) != nil || env.Kind == nil || *env.Kind != "action" ||
		env.Output == nil || text(env.Output.FullResponse, true, true, MaxTextBytes) != "" ||
		text(env.Output.Summary, true, true, MaxTextBytes) != "" {
		st.actionFailed("parse_failed", "Action result parse failed")
		return
	}
	s.actionTask = nil
	s.action = &ActionOutput{ActorID: t.pid, Status: "completed", FullResponse: *env.Output.FullResponse,
		Summary: *env.Output.Summary}
	st.emit(EventActionCompleted, &ActionCompletedPayload{ActorID: t.pid, Summary: *env.Output.Summary}, st.at)
	st.finish()
}

func (st *stepper) onActionFailed(kind FailureKind, msg string) {
	st.add(ClearTimer{ID: st.s.actionTask.id})
	switch kind {
	case FailDispatch:
		st.actionFailed("dispatch_failed", orDefault(msg, "dispatch failed"))
	case FailAwait:
		st.actionFailed("await_failed", orDefault(msg, "await failed"))
	default:
		st.actionFailed("task_failed", orDefault(msg, "Action task failed"))
	}
}

// actionFailed records a failed action; it never changes the debate status.
func (st *stepper) actionFailed(reason, msg string) {
	s := st.s
	actor := s.actionTask.pid
	s.actionTask = nil
	st.emit(EventActionFailed, &ActionFailedPayload{ActorID: actor, Reason: reason}, st.at)
	s.action = &ActionOutput{ActorID: actor, Status: "failed", Error: msg}
	st.finish()
}

// isEmptyJSON reports a missing answer (no bytes, or JSON null).
func isEmptyJSON(raw []byte) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}
