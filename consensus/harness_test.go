package consensus

import (
	"encoding/json"
	"errors"
	"testing"
)

// harness drives Step by hand so tests control every input.
type harness struct {
	t      *testing.T
	s      *State
	now    int64
	tasks  map[string]*Task // outstanding dispatched tasks by id
	order  []string         // dispatch order
	events []Event
	timers map[string]int64
	fin    *Finish
	fx     []Effect // effects of the last step
}

func newHarness(t *testing.T, req *Request) *harness {
	t.Helper()
	h := &harness{t: t, now: 1000, tasks: map[string]*Task{}, timers: map[string]int64{}}
	h.step(Start(h.now, "sid", req))
	return h
}

func (h *harness) step(in Input) error {
	h.t.Helper()
	if in.At == 0 {
		in.At = h.now
	}
	s, fx, err := step(h.s, in)
	if err != nil {
		if !errors.Is(err, ErrIgnored) {
			h.t.Fatalf("step(%+v): %v", in, err)
		}
		return err
	}
	h.s, h.fx = s, fx
	for _, e := range fx {
		switch e := e.(type) {
		case DispatchTask:
			h.tasks[e.Task.ID] = e.Task
			h.order = append(h.order, e.Task.ID)
		case SetTimer:
			h.timers[e.ID] = e.At
		case ClearTimer:
			delete(h.timers, e.ID)
		case EmitEvent:
			h.events = append(h.events, *e.Event)
		case Finish:
			f := e
			h.fin = &f
		}
	}
	return nil
}

// answer sends output content (wrapped like a scripted agent) for a task.
func (h *harness) answer(taskID string, a Answer) error {
	h.t.Helper()
	task := h.tasks[taskID]
	if task == nil {
		h.t.Fatalf("no task %s (have %v)", taskID, h.order)
	}
	var raw json.RawMessage
	switch {
	case len(a.Raw) > 0:
		raw = a.Raw
	default:
		var err error
		if raw, err = wrapOutput(task, a.Output); err != nil {
			h.t.Fatal(err)
		}
	}
	return h.step(TaskResult(h.now, taskID, task.ParticipantID, raw))
}

// persona answers every outstanding task of the current round with the persona.
func (h *harness) personaRound() {
	h.t.Helper()
	for _, id := range h.pending() {
		raw, _ := Persona{}.Answer(h.tasks[id])
		h.step(TaskResult(h.now, id, h.tasks[id].ParticipantID, raw))
	}
}

// pending lists the task ids the state still waits for, in dispatch order.
func (h *harness) pending() []string {
	var ids []string
	for _, t := range h.s.OutstandingTasks() {
		ids = append(ids, t.ID)
	}
	return ids
}

func (h *harness) eventTypes() []string {
	out := make([]string, len(h.events))
	for i, e := range h.events {
		out[i] = e.Type
	}
	return out
}

func (h *harness) lastEvent(typ string) *Event {
	for i := len(h.events) - 1; i >= 0; i-- {
		if h.events[i].Type == typ {
			return &h.events[i]
		}
	}
	return nil
}

func (h *harness) result() *Result {
	h.t.Helper()
	if h.fin == nil || h.fin.Result == nil {
		h.t.Fatalf("run not finished with a result: %+v", h.fin)
	}
	return h.fin.Result
}
