package consensus

import (
	"strings"
	"testing"
)

// toReport runs a 3-participant persona debate up to the report stage.
func toReport(t *testing.T, extra string) *harness {
	h := newHarness(t, threeReq(t, `,"reportPolicy":{"composer":"representative"}`+extra))
	for h.s.cur != nil {
		h.personaRound()
	}
	if h.s.reportTask == nil {
		t.Fatalf("no report task; events %v", h.eventTypes())
	}
	return h
}

func TestReport_Representative(t *testing.T) {
	h := toReport(t, "")
	id := h.s.reportTask.id
	task := h.tasks[id]
	if task.Kind != TaskReport || task.SessionID != "argue:sid:report:"+task.ParticipantID || !task.ReportMetadata.SeparateSession {
		t.Fatalf("report task = %+v", task)
	}
	h.answer(id, Answer{Output: []byte(`{"mode":"builtin","traceIncluded":false,"traceLevel":"compact","finalSummary":"FS","representativeSpeech":"RS","roundHighlights":[]}`)})
	res := h.result()
	if res.Report.Mode != ComposerRepresentative || res.Report.FinalSummary != "FS" || res.Report.RoundHighlights == nil {
		t.Errorf("report = %+v", res.Report)
	}
	if p := h.lastEvent(EventReportCompleted).Payload.(*ReportCompletedPayload); p.Mode != ComposerRepresentative || p.Reason != "" {
		t.Errorf("ReportCompleted = %+v", p)
	}
}

func TestReport_Fallbacks(t *testing.T) {
	cases := map[string]struct {
		input  func(h *harness, id, pid string) Input
		reason string
	}{
		"parse_failed": {func(h *harness, id, pid string) Input {
			return TaskResult(h.now, id, pid, []byte(`{"kind":"report","output":{"mode":"builtin"}}`))
		}, "parse_failed"},
		"no output":       {func(h *harness, id, pid string) Input { return TaskResult(h.now, id, pid, nil) }, "task_failed"},
		"delegate error":  {func(h *harness, id, pid string) Input { return TaskFailed(h.now, id, pid, FailError, "x") }, "task_failed"},
		"dispatch failed": {func(h *harness, id, pid string) Input { return TaskFailed(h.now, id, pid, FailDispatch, "x") }, "dispatch_failed"},
		"await failed":    {func(h *harness, id, pid string) Input { return TaskFailed(h.now, id, pid, FailAwait, "x") }, "await_failed"},
		"timeout": {func(h *harness, id, pid string) Input {
			return TimerFired(h.s.reportTask.due, id)
		}, "task_failed"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := toReport(t, "")
			rt := h.s.reportTask
			h.step(c.input(h, rt.id, rt.pid))
			res := h.result()
			if res.Report.Mode != ComposerBuiltin || !strings.HasPrefix(res.Report.FinalSummary, "Consensus reached.") &&
				!strings.HasPrefix(res.Report.FinalSummary, "Partial consensus.") {
				t.Errorf("fallback report = %+v", res.Report)
			}
			p := h.lastEvent(EventReportCompleted).Payload.(*ReportCompletedPayload)
			if p.Mode != ComposerBuiltin || p.Reason != c.reason {
				t.Errorf("ReportCompleted = %+v, want reason %s", p, c.reason)
			}
		})
	}
}

func TestReport_BuiltinTrace(t *testing.T) {
	h := newHarness(t, threeReq(t, `,"reportPolicy":{"includeDeliberationTrace":true,"traceLevel":"compact"}`))
	for h.s.cur != nil {
		h.personaRound()
	}
	rep := h.result().Report
	if !rep.TraceIncluded || len(rep.RoundHighlights) == 0 || len(rep.OpinionShiftTimeline) == 0 {
		t.Fatalf("trace = %+v", rep)
	}
	first := rep.OpinionShiftTimeline[0]
	if first.From != "unknown" {
		t.Errorf("first shift = %+v", first)
	}
	for _, hl := range rep.RoundHighlights {
		if utf16Len(hl.Summary) > 140 {
			t.Errorf("highlight too long: %d", utf16Len(hl.Summary))
		}
	}
}

func TestAction_Outcomes(t *testing.T) {
	toAction := func(t *testing.T, extra string) *harness {
		h := newHarness(t, threeReq(t, `,"actionPolicy":{"prompt":"act"`+extra+`}`))
		for h.s.cur != nil {
			h.personaRound()
		}
		return h
	}
	t.Run("completed", func(t *testing.T) {
		h := toAction(t, "")
		at := h.s.actionTask
		task := h.tasks[at.id]
		if task.FullResult == nil || task.FullResult.Action != nil || task.ArgueResult.Status == "" || task.SessionID != "argue:sid:action:"+at.pid {
			t.Fatalf("action task = %+v", task)
		}
		h.answer(at.id, Answer{Output: []byte(`{"fullResponse":"F","summary":"S"}`)})
		if a := h.result().Action; a == nil || a.Status != "completed" || a.Summary != "S" {
			t.Errorf("action = %+v", a)
		}
	})
	t.Run("parse_failed", func(t *testing.T) {
		h := toAction(t, `,"includeFullResult":false`)
		at := h.s.actionTask
		if h.tasks[at.id].FullResult != nil {
			t.Errorf("full result sent despite includeFullResult=false")
		}
		h.answer(at.id, Answer{Output: []byte(`{"fullResponse":""}`)})
		if a := h.result().Action; a.Status != "failed" || a.Error != "Action result parse failed" {
			t.Errorf("action = %+v", a)
		}
	})
	t.Run("task_failed", func(t *testing.T) {
		h := toAction(t, "")
		at := h.s.actionTask
		h.step(TaskFailed(h.now, at.id, at.pid, FailError, ""))
		if a := h.result().Action; a.Status != "failed" || a.Error != "Action task failed" {
			t.Errorf("action = %+v", a)
		}
	})
	t.Run("inactive_actor", func(t *testing.T) {
		h := toAction(t, `,"actorId":"ghost"`)
		a := h.result().Action
		if a.Status != "failed" || a.Error != "Actor ghost is not an active participant" {
			t.Errorf("action = %+v", a)
		}
		if p := h.lastEvent(EventActionFailed).Payload.(*ActionFailedPayload); p.Reason != "inactive_actor" {
			t.Errorf("ActionFailed = %+v", p)
		}
		if h.result().Status == "" || h.eventTypes()[len(h.events)-1] != EventFinalized {
			t.Errorf("action failure must not change the run's outcome: %v", h.eventTypes())
		}
	})
}

func TestCancel_FailsRunAndCancelsTasks(t *testing.T) {
	h := newHarness(t, threeReq(t, ""))
	h.step(Cancel(h.now, "operator"))
	if h.fin == nil || h.fin.Failure == nil || h.fin.Failure.Code != "Cancelled" || h.s.Lifecycle() != LifeFailed {
		t.Fatalf("finish = %+v", h.fin)
	}
	n := 0
	for _, e := range h.fx {
		if _, ok := e.(CancelTask); ok {
			n++
		}
	}
	if n != 3 {
		t.Errorf("cancelled %d tasks, want 3", n)
	}
	if len(h.s.OutstandingTasks()) != 0 {
		t.Errorf("outstanding tasks after cancel")
	}
}
