package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Agent answers tasks. Handle returns the agent's raw JSON result (for a
// round task `{"kind":"round","output":{...}}`) or an error, which the
// driver reports as a failed task. Handle may be called from several
// goroutines at once by the wall-clock driver of consensus/local.
type Agent interface {
	Handle(ctx context.Context, task *Task) (json.RawMessage, error)
}

// AgentFunc adapts a function to Agent.
type AgentFunc func(ctx context.Context, task *Task) (json.RawMessage, error)

// Handle implements Agent.
func (f AgentFunc) Handle(ctx context.Context, task *Task) (json.RawMessage, error) {
	return f(ctx, task)
}

// Directory finds the agent of a participant (or of an external reporter).
type Directory interface {
	Agent(participantID string) (Agent, bool)
}

// AgentMap is a Directory backed by a map.
type AgentMap map[string]Agent

// Agent implements Directory.
func (m AgentMap) Agent(id string) (Agent, bool) { a, ok := m[id]; return a, ok }

// Latency is implemented by agents that simulate answer times. Under
// Simulate's virtual clock an answer arrives LatencyMs after dispatch; a
// negative value means the agent never answers (its task times out). The
// wall-clock driver ignores it.
type Latency interface {
	LatencyMs(task *Task) int64
}

// SimOptions configures Simulate.
type SimOptions struct {
	// SessionID is the run's session id ("local" when empty).
	SessionID string
	// StartMs is the virtual clock's start time (ms since the epoch).
	StartMs int64
	// OnEvent, when set, sees every event as it is emitted.
	OnEvent func(Event)
	// OnIgnored, when set, sees every input the engine ignored (a late
	// answer, an early timer): the caller decides whether to log it.
	OnIgnored func(error)
}

// Outcome is a run driven to its end by Simulate or by consensus/local.
// Exactly one of Result and Failure is set. Inputs is the input sequence
// fed to the reducer, enough to replay the run.
type Outcome struct {
	Result  *Result
	Failure *Failure
	Events  []Event
	Inputs  []Input
	State   *State
}

// Simulate runs req to completion against agents on a virtual clock: agents
// are called one at a time in dispatch order, answers arrive after their
// Latency, and timers fire instantly in virtual time, so a run is a pure
// function of its arguments. It is the deterministic driver the engine's
// tests, benchmarks and scripted runs use; consensus/local adds the
// wall-clock driver. It returns an error for an invalid request, when ctx
// ends first (the run is then cancelled and still returned), or on an engine
// invariant violation.
func Simulate(ctx context.Context, req *Request, agents Directory, opts SimOptions) (*Outcome, error) {
	sid := opts.SessionID
	if sid == "" {
		sid = "local"
	}
	s := &simulation{agents: agents, now: opts.StartMs, tr: NewTracker(opts.OnEvent, opts.OnIgnored)}
	return s.run(ctx, Start(s.now, sid, req))
}

type timerEntry struct {
	due int64
	seq int64
}

// Tracker holds one run while a driver feeds it inputs: the state, the
// timers the engine set, the events so far and the outcome. It performs the
// bookkeeping effects itself (timers, events, finish) and hands dispatch and
// cancel effects to the driver. Simulate and the wall-clock driver of
// consensus/local share it. Not safe for concurrent use.
type Tracker struct {
	state     *State
	out       Outcome
	seq       int64
	timers    map[string]timerEntry
	done      bool
	onEvent   func(Event)
	onIgnored func(error)
}

// NewTracker returns an empty tracker; onEvent and onIgnored may be nil.
func NewTracker(onEvent func(Event), onIgnored func(error)) *Tracker {
	return &Tracker{timers: map[string]timerEntry{}, onEvent: onEvent, onIgnored: onIgnored}
}

// Apply feeds one input to the run (the first must be a start input) and
// performs its effects: dispatch and cancel go to the driver's functions.
// An input the engine ignores is reported to onIgnored and is no error.
func (t *Tracker) Apply(in Input, dispatch func(*Task), cancel func(taskID string)) error {
	var fx []Effect
	var err error
	if t.state == nil {
		t.state, fx, err = NewState(in)
	} else {
		fx, err = t.state.Apply(in)
	}
	if err != nil {
		if errors.Is(err, ErrIgnored) {
			if t.onIgnored != nil {
				t.onIgnored(err)
			}
			return nil
		}
		return err
	}
	t.out.Inputs = append(t.out.Inputs, in)
	for _, e := range fx {
		switch e := e.(type) {
		case DispatchTask:
			dispatch(e.Task)
		case SetTimer:
			t.seq++
			t.timers[e.ID] = timerEntry{due: e.At, seq: t.seq}
		case ClearTimer:
			delete(t.timers, e.ID)
		case CancelTask:
			cancel(e.TaskID)
		case EmitEvent:
			t.out.Events = append(t.out.Events, *e.Event)
			if t.onEvent != nil {
				t.onEvent(*e.Event)
			}
		case Finish:
			t.out.Result, t.out.Failure, t.done = e.Result, e.Failure, true
		}
	}
	return nil
}

// Done reports whether the run finished.
func (t *Tracker) Done() bool { return t.done }

// NextTimer returns the earliest timer (ties by the order they were set).
func (t *Tracker) NextTimer() (id string, due int64, ok bool) {
	var best timerEntry
	for tid, e := range t.timers {
		if !ok || e.due < best.due || (e.due == best.due && e.seq < best.seq) {
			id, best, ok = tid, e, true
		}
	}
	return id, best.due, ok
}

// RemoveTimer forgets a timer the driver is about to fire.
func (t *Tracker) RemoveTimer(id string) { delete(t.timers, id) }

// Outcome returns the run so far, with its current state.
func (t *Tracker) Outcome() *Outcome {
	t.out.State = t.state
	return &t.out
}

// ReplyInput turns an agent's answer to t into the input that reports it:
// a result, or a failed task (a timeout when err is a deadline).
func ReplyInput(at int64, t *Task, raw json.RawMessage, err error) Input {
	if err == nil {
		return TaskResult(at, t.ID, t.ParticipantID, raw)
	}
	kind := FailError
	if errors.Is(err, context.DeadlineExceeded) {
		kind = FailTimeout
	}
	return TaskFailed(at, t.ID, t.ParticipantID, kind, err.Error())
}

// NoAgentInput is the failed-task input for a task whose participant has no
// agent in the directory.
func NoAgentInput(at int64, t *Task) Input {
	return TaskFailed(at, t.ID, t.ParticipantID, FailDispatch, ErrNoAgent.Error()+" "+t.ParticipantID)
}

type delivery struct {
	in  Input
	at  int64
	seq int64
}

// simulation is Simulate's discrete-event loop.
type simulation struct {
	agents Directory
	tr     *Tracker
	now    int64
	seq    int64
	queue  []delivery
}

func (s *simulation) run(ctx context.Context, start Input) (*Outcome, error) {
	dispatch := func(t *Task) {
		a, ok := s.agents.Agent(t.ParticipantID)
		if !ok {
			s.push(NoAgentInput(s.now, t), s.now)
			return
		}
		lat := int64(0)
		if l, ok := a.(Latency); ok {
			lat = l.LatencyMs(t)
		}
		if lat < 0 {
			return // never answers: the task timer settles it
		}
		raw, err := a.Handle(ctx, t)
		s.push(ReplyInput(s.now+lat, t, raw, err), s.now+lat)
	}
	if err := s.tr.Apply(start, dispatch, s.cancel); err != nil {
		return nil, err
	}
	for !s.tr.Done() {
		if err := ctx.Err(); err != nil {
			if aerr := s.tr.Apply(Cancel(s.now, err.Error()), dispatch, s.cancel); aerr != nil {
				return s.tr.Outcome(), aerr
			}
			return s.tr.Outcome(), err
		}
		in, ok := s.next()
		if !ok {
			return s.tr.Outcome(), fmt.Errorf("consensus: run stalled with nothing pending")
		}
		if err := s.tr.Apply(in, dispatch, s.cancel); err != nil {
			return s.tr.Outcome(), err
		}
	}
	return s.tr.Outcome(), nil
}

// cancel drops the queued answer of a cancelled task.
func (s *simulation) cancel(id string) {
	kept := s.queue[:0]
	for _, q := range s.queue {
		if q.in.TaskID != id {
			kept = append(kept, q)
		}
	}
	s.queue = kept
}

func (s *simulation) push(in Input, at int64) {
	s.seq++
	s.queue = append(s.queue, delivery{in: in, at: at, seq: s.seq})
}

// next pops the earliest delivery or timer; at equal times an answer goes
// first, so a reply due exactly at a deadline still counts.
func (s *simulation) next() (Input, bool) {
	qi := -1
	for i, q := range s.queue {
		if qi < 0 || q.at < s.queue[qi].at || (q.at == s.queue[qi].at && q.seq < s.queue[qi].seq) {
			qi = i
		}
	}
	tid, due, tok := s.tr.NextTimer()
	if qi >= 0 && (!tok || s.queue[qi].at <= due) {
		q := s.queue[qi]
		s.queue = append(s.queue[:qi], s.queue[qi+1:]...)
		if q.at > s.now {
			s.now = q.at
		}
		q.in.At = s.now
		return q.in, true
	}
	if !tok {
		return Input{}, false
	}
	s.tr.RemoveTimer(tid)
	if due > s.now {
		s.now = due
	}
	return TimerFired(s.now, tid), true
}
