package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Agent answers tasks. Handle returns the agent's raw JSON result (for a
// round task `{"kind":"round","output":{...}}`) or an error, which the
// driver reports as a failed task. Handle may be called from several
// goroutines at once by the wall-clock driver.
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

// Latency is implemented by agents that simulate answer times. Under the
// virtual clock an answer arrives LatencyMs after dispatch; a negative value
// means the agent never answers (its task times out). The wall-clock driver
// ignores it.
type Latency interface {
	LatencyMs(task *Task) int64
}

// Clock tells the wall-clock driver the time in ms since the epoch.
type Clock interface{ NowMs() int64 }

// WallClock reads the system clock.
type WallClock struct{}

// NowMs implements Clock.
func (WallClock) NowMs() int64 { return time.Now().UnixMilli() }

// LocalOptions configures RunLocal.
type LocalOptions struct {
	// SessionID is the run's session id ("local" when empty).
	SessionID string
	// Clock selects the wall-clock driver (agents run concurrently, timers
	// are real). When nil the run uses a virtual clock: agents are called one
	// at a time in dispatch order, answers arrive after their Latency, and
	// timers fire instantly in virtual time, so runs are fully deterministic.
	Clock Clock
	// StartMs is the virtual clock's start time (ms since the epoch).
	StartMs int64
	// OnEvent, when set, sees every event as it is emitted (from the
	// goroutine that called RunLocal).
	OnEvent func(Event)
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// LocalRun is the outcome of RunLocal. Exactly one of Result and Failure is
// set. Inputs is the input sequence fed to Step, enough to replay the run.
type LocalRun struct {
	Result  *Result
	Failure *Failure
	Events  []Event
	Inputs  []Input
	State   *State
}

// RunLocal runs req to completion against agents, in process. It is the I/O
// shell around Step used by tests and `concord argue run --local`. It returns
// an error for an invalid request, when ctx ends first (the run is then
// cancelled and still returned), or on an engine invariant violation.
func RunLocal(ctx context.Context, req *Request, agents Directory, opts LocalOptions) (*LocalRun, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &driver{agents: agents, opts: opts, log: log.With("component", "consensus_driver"),
		timers: map[string]timerEntry{}, run: &LocalRun{}}
	sid := opts.SessionID
	if sid == "" {
		sid = "local"
	}
	if opts.Clock == nil {
		d.now = opts.StartMs
		return d.runVirtual(ctx, Start(d.now, sid, req))
	}
	return d.runWall(ctx, Start(opts.Clock.NowMs(), sid, req))
}

type timerEntry struct {
	due int64
	seq int64
}

type delivery struct {
	in  Input
	at  int64
	seq int64
}

type driver struct {
	agents Directory
	opts   LocalOptions
	log    *slog.Logger
	state  *State
	run    *LocalRun
	now    int64
	seq    int64
	timers map[string]timerEntry
	queue  []delivery // virtual clock only
	done   bool
	// wall clock only
	results chan Input
	cancels map[string]context.CancelFunc
	wg      sync.WaitGroup
}

// apply feeds one input and performs its effects through handle.
func (d *driver) apply(in Input, dispatch func(*Task)) error {
	s, fx, err := Step(d.state, in)
	if err != nil {
		if errors.Is(err, ErrIgnored) {
			d.log.Debug("input ignored", "err", err)
			return nil
		}
		return err
	}
	d.state = s
	d.run.Inputs = append(d.run.Inputs, in)
	for _, e := range fx {
		switch e := e.(type) {
		case DispatchTask:
			dispatch(e.Task)
		case SetTimer:
			d.seq++
			d.timers[e.ID] = timerEntry{due: e.At, seq: d.seq}
		case ClearTimer:
			delete(d.timers, e.ID)
		case CancelTask:
			d.cancelTask(e.TaskID)
		case EmitEvent:
			d.run.Events = append(d.run.Events, *e.Event)
			if d.opts.OnEvent != nil {
				d.opts.OnEvent(*e.Event)
			}
		case Finish:
			d.run.Result, d.run.Failure, d.done = e.Result, e.Failure, true
		}
	}
	return nil
}

func (d *driver) cancelTask(id string) {
	if d.cancels != nil {
		if c, ok := d.cancels[id]; ok {
			c()
			delete(d.cancels, id)
		}
		return
	}
	kept := d.queue[:0]
	for _, q := range d.queue {
		if q.in.TaskID != id {
			kept = append(kept, q)
		}
	}
	d.queue = kept
}

// nextTimer returns the earliest timer (ties by the order they were set).
func (d *driver) nextTimer() (string, timerEntry, bool) {
	var bestID string
	var best timerEntry
	found := false
	for id, t := range d.timers {
		if !found || t.due < best.due || (t.due == best.due && t.seq < best.seq) {
			bestID, best, found = id, t, true
		}
	}
	return bestID, best, found
}

func answerInput(at int64, t *Task, raw json.RawMessage, err error) Input {
	if err == nil {
		return TaskResult(at, t.ID, t.ParticipantID, raw)
	}
	kind := FailError
	if errors.Is(err, context.DeadlineExceeded) {
		kind = FailTimeout
	}
	return TaskFailed(at, t.ID, t.ParticipantID, kind, err.Error())
}

// runVirtual is the deterministic discrete-event loop.
func (d *driver) runVirtual(ctx context.Context, start Input) (*LocalRun, error) {
	dispatch := func(t *Task) {
		a, ok := d.agents.Agent(t.ParticipantID)
		if !ok {
			d.push(TaskFailed(d.now, t.ID, t.ParticipantID, FailDispatch, ErrNoAgent.Error()+" "+t.ParticipantID), d.now)
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
		d.push(answerInput(d.now+lat, t, raw, err), d.now+lat)
	}
	if err := d.apply(start, dispatch); err != nil {
		return nil, err
	}
	for !d.done {
		if err := ctx.Err(); err != nil {
			if aerr := d.apply(Cancel(d.now, err.Error()), dispatch); aerr != nil {
				return d.finish(), aerr
			}
			return d.finish(), err
		}
		in, ok := d.nextVirtual()
		if !ok {
			return d.finish(), fmt.Errorf("consensus: run stalled with nothing pending")
		}
		if err := d.apply(in, dispatch); err != nil {
			return d.finish(), err
		}
	}
	return d.finish(), nil
}

func (d *driver) push(in Input, at int64) {
	d.seq++
	d.queue = append(d.queue, delivery{in: in, at: at, seq: d.seq})
}

// nextVirtual pops the earliest delivery or timer; at equal times an answer
// goes first, so a reply due exactly at a deadline still counts.
func (d *driver) nextVirtual() (Input, bool) {
	qi := -1
	for i, q := range d.queue {
		if qi < 0 || q.at < d.queue[qi].at || (q.at == d.queue[qi].at && q.seq < d.queue[qi].seq) {
			qi = i
		}
	}
	tid, te, tok := d.nextTimer()
	if qi >= 0 && (!tok || d.queue[qi].at <= te.due) {
		q := d.queue[qi]
		d.queue = append(d.queue[:qi], d.queue[qi+1:]...)
		if q.at > d.now {
			d.now = q.at
		}
		q.in.At = d.now
		return q.in, true
	}
	if !tok {
		return Input{}, false
	}
	delete(d.timers, tid)
	if te.due > d.now {
		d.now = te.due
	}
	return TimerFired(d.now, tid), true
}

func (d *driver) finish() *LocalRun {
	d.run.State = d.state
	return d.run
}
