package consensus

import "fmt"

// NewState starts a run: in must be a start input (see Start). It returns
// the run's first state and the effects the caller must perform, in order.
// An invalid request returns a *ValidationError and no state; any other
// input kind returns ErrNoRun.
func NewState(in Input) (*State, []Effect, error) {
	if in.Kind != InputStart {
		return nil, nil, ErrNoRun
	}
	return start(in)
}

// Apply applies one input to the run s in place and returns the effects the
// caller must perform, in order. A caller that needs the old state must
// Clone it first.
//
// Apply mutates rather than returning a new state because a run's state
// grows with its claims and judgements: copying it per input would make
// every step cost O(state), where a step now costs O(input) (the Step
// benchmarks in this package and in stepbench measure it). The function is
// still deterministic: it reads no clock, draws no random numbers, does no
// I/O and never iterates a map, so replicas that apply the same inputs hold
// byte-identical states.
//
// Apply on a nil state returns ErrNoRun. An input that changes nothing
// (a second start, an unknown or already settled task, an early timer, a
// finished run) returns no effects and an *IgnoredError. Agent output is
// untrusted: malformed output becomes a failed task, never a panic or an
// error here.
func (s *State) Apply(in Input) ([]Effect, error) {
	if s == nil {
		return nil, ErrNoRun
	}
	if in.Kind == InputStart {
		return nil, ignored("run already started")
	}
	if s.Done() {
		return nil, ignored("run is " + s.life.String())
	}
	st := newStepper(s, in.At)
	var err error
	switch in.Kind {
	case InputTaskResult:
		err = st.onTaskResult(in)
	case InputTaskFailed:
		err = st.onTaskFailed(in)
	case InputTimer:
		err = st.onTimer(in)
	case InputCancel:
		st.fail(Failure{Code: "Cancelled", Message: cancelMessage(in.Reason)})
	default:
		err = ignored(fmt.Sprintf("unknown input kind %d", in.Kind))
	}
	if err != nil {
		return nil, err
	}
	if len(st.fx) == 0 {
		return nil, nil // as before the effects were pre-allocated
	}
	return st.fx, nil
}

func cancelMessage(reason string) string {
	if reason == "" {
		return "Run cancelled"
	}
	return "Run cancelled: " + reason
}

// stepper accumulates the effects of one Apply (or of NewState).
type stepper struct {
	s      *State
	at     int64
	fx     []Effect
	atText string // isoTime(at), once needed
}

func newStepper(s *State, at int64) *stepper {
	// Most inputs produce a few effects: reserve them in one allocation.
	return &stepper{s: s, at: at, fx: make([]Effect, 0, 4)}
}

func (st *stepper) add(e Effect) { st.fx = append(st.fx, e) }

// iso is isoTime(at), formatted once per step for the step's own time:
// events, eliminations and respondedAt of one step share the string.
func (st *stepper) iso(at int64) string {
	if at != st.at {
		return isoTime(at)
	}
	if st.atText == "" {
		st.atText = isoTime(at)
	}
	return st.atText
}

func start(in Input) (*State, []Effect, error) {
	if in.Request == nil {
		return nil, nil, &ValidationError{Errors: []FieldError{{Path: "", Message: "request is required"}}}
	}
	if err := in.Request.Validate(); err != nil {
		return nil, nil, err
	}
	if in.SessionID == "" {
		return nil, nil, &ValidationError{Errors: []FieldError{{Path: "sessionId", Message: "is required"}}}
	}
	// The state owns a private, canonical copy: later edits to the caller's
	// Request cannot reach it, and replicas hold identical bytes.
	req, err := cloneRequest(in.Request)
	if err != nil {
		return nil, nil, err
	}
	s := &State{sessionID: in.SessionID, req: req, startedAt: in.At, life: LifeRunning, prevRound: -1,
		active: make([]bool, len(req.Participants)), activeCount: len(req.Participants)}
	for i := range s.active {
		s.active[i] = true
	}
	s.rebuildIndex()
	st := newStepper(s, in.At)
	ids := make([]string, len(req.Participants))
	for i, p := range req.Participants {
		ids[i] = p.ID
	}
	st.emit(EventSessionStarted, &SessionStartedPayload{Participants: ids,
		MinParticipants: req.ParticipantsPolicy.MinParticipants}, in.At)
	if d := s.deadlineAt(); d != 0 {
		st.add(SetTimer{ID: s.deadlineTimerID(), Kind: TimerDeadline, At: d})
	}
	st.startRound(PhaseInitial, 0)
	return s, st.fx, nil
}

// onTaskResult routes a raw answer to the task it names.
func (st *stepper) onTaskResult(in Input) error {
	s := st.s
	if slot := st.findRoundTask(in.TaskID); slot != nil {
		if slot.pid != in.ParticipantID {
			return ignored("result sender does not own task " + in.TaskID)
		}
		var out *Output
		var err error
		if in.Parsed != nil {
			out, err = in.Parsed.bind(slot.pid, s.cur.phase, s.cur.round)
		} else {
			out, err = decodeRoundOutput(in.Output, slot.pid, s.cur.phase, s.cur.round)
		}
		if err != nil {
			st.settleRoundTask(slot, taskFailed, nil, err.Error())
		} else {
			st.settleRoundTask(slot, taskCompleted, out, "")
		}
		st.maybeCloseRound()
		return nil
	}
	if t := s.reportTask; t != nil && t.id == in.TaskID {
		if err := checkRawResult(in, t); err != nil {
			return err
		}
		st.onReportResult(in.Output)
		return nil
	}
	if t := s.actionTask; t != nil && t.id == in.TaskID {
		if err := checkRawResult(in, t); err != nil {
			return err
		}
		st.onActionResult(in.Output)
		return nil
	}
	return ignored("unknown or settled task " + in.TaskID)
}

// checkRawResult: a report or action result must come from the task's
// participant, as raw JSON (RoundResult only parses round results).
func checkRawResult(in Input, t *pendingTask) error {
	if t.pid != in.ParticipantID {
		return ignored("result sender does not own task " + in.TaskID)
	}
	if in.Output == nil && in.Parsed != nil {
		return ignored("a parsed round result cannot answer task " + in.TaskID)
	}
	return nil
}

// onTaskFailed handles a delegate-reported failure.
func (st *stepper) onTaskFailed(in Input) error {
	s := st.s
	if slot := st.findRoundTask(in.TaskID); slot != nil {
		if in.ParticipantID != "" && slot.pid != in.ParticipantID {
			return ignored("failure sender does not own task " + in.TaskID)
		}
		switch in.Failure {
		case FailDispatch:
			st.fail(Failure{Code: "Error", Message: fmt.Sprintf("dispatch failed for task %s: %s", slot.id, in.Error)})
			return nil
		case FailTimeout:
			st.settleRoundTask(slot, taskTimedOut, nil, orDefault(in.Error, "__timeout__"))
		default:
			st.settleRoundTask(slot, taskFailed, nil, orDefault(in.Error, "task failed"))
		}
		st.maybeCloseRound()
		return nil
	}
	if t := s.reportTask; t != nil && t.id == in.TaskID {
		st.onReportFailed(in.Failure)
		return nil
	}
	if t := s.actionTask; t != nil && t.id == in.TaskID {
		st.onActionFailed(in.Failure, in.Error)
		return nil
	}
	return ignored("unknown or settled task " + in.TaskID)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// onTimer handles a due timer. A timer input earlier than the timer's due
// time is ignored, so a confused driver cannot cut a wait short.
func (st *stepper) onTimer(in Input) error {
	s := st.s
	if cur := s.cur; cur != nil {
		isDeadline := s.deadlineAt() != 0 && in.TimerID == s.deadlineTimerID()
		if in.TimerID == s.roundTimerID(cur.round) || isDeadline {
			due := cur.timerDue
			if isDeadline {
				due = s.deadlineAt()
			}
			if in.At < due {
				return ignored("timer " + in.TimerID + " is not due")
			}
			st.expireRound()
			return nil
		}
		if slot := st.findRoundTask(in.TimerID); slot != nil {
			if in.At < slot.due {
				return ignored("timer " + in.TimerID + " is not due")
			}
			st.settleRoundTask(slot, taskTimedOut, nil, "__timeout__")
			st.maybeCloseRound()
			return nil
		}
	}
	if t := s.reportTask; t != nil && t.id == in.TimerID {
		if in.At < t.due {
			return ignored("timer " + in.TimerID + " is not due")
		}
		st.add(CancelTask{TaskID: t.id})
		st.onReportFailed(FailTimeout)
		return nil
	}
	if t := s.actionTask; t != nil && t.id == in.TimerID {
		if in.At < t.due {
			return ignored("timer " + in.TimerID + " is not due")
		}
		st.add(CancelTask{TaskID: t.id})
		st.onActionFailed(FailTimeout, "__timeout__")
		return nil
	}
	return ignored("unknown or stale timer " + in.TimerID)
}

// findRoundTask returns the pending slot with the given id, or nil.
func (st *stepper) findRoundTask(id string) *taskSlot {
	cur := st.s.cur
	if cur == nil {
		return nil
	}
	for i := range cur.tasks {
		if cur.tasks[i].id == id && cur.tasks[i].status == taskPending {
			return &cur.tasks[i]
		}
	}
	return nil
}

// fail moves the run to failed (spec §20): outstanding work is cancelled,
// timers cleared, a Failed event emitted, and no result produced.
func (st *stepper) fail(f Failure) {
	s := st.s
	st.clearAll()
	s.life = LifeFailed
	s.failure = &f
	s.finishedAt = st.at
	st.emit(EventFailed, &FailedPayload{Code: f.Code, Message: f.Message}, st.at)
	st.add(Finish{Failure: &f})
}

// clearAll cancels every outstanding task and timer of the run.
func (st *stepper) clearAll() {
	s := st.s
	if cur := s.cur; cur != nil {
		for i := range cur.tasks {
			if cur.tasks[i].status == taskPending {
				st.add(CancelTask{TaskID: cur.tasks[i].id})
				st.add(ClearTimer{ID: cur.tasks[i].id})
			}
		}
		st.add(ClearTimer{ID: s.roundTimerID(cur.round)})
		s.cur = nil
	}
	for _, t := range []*pendingTask{s.reportTask, s.actionTask} {
		if t != nil {
			st.add(CancelTask{TaskID: t.id})
			st.add(ClearTimer{ID: t.id})
		}
	}
	s.reportTask, s.actionTask = nil, nil
	if s.deadlineAt() != 0 {
		st.add(ClearTimer{ID: s.deadlineTimerID()})
	}
}
