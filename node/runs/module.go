package runs

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/consensus"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// moduleName is persisted in snapshots; never change it.
const moduleName = "runs"

// Module is the replicated state module "runs": every consensus run, fed
// one engine input per COMMAND_TYPE_RUN_INPUT entry. It implements
// raftstore.Module; Apply, Snapshot and Restore run on raft's FSM
// goroutine. Reads (Get, List, Check) are safe from any goroutine.
//
// Lock order: Module.mu, then outbox.mu.
type Module struct {
	log         *slog.Logger
	events      EventAppender
	origins     SessionOrigins // nil: quoted sessions are not checked
	outboxLimit int

	mu     sync.RWMutex // guards everything below
	runs   map[string]*run
	ids    []string      // run ids, sorted
	out    *outbox       // the leader's driver feed; nil when none
	notify chan struct{} // closed and replaced after every applied input
}

var _ raftstore.Module = (*Module)(nil)

// Applied is the result of an applied RUN_INPUT (the value Store.Apply
// returns for it).
type Applied struct {
	// RunID and RequestID identify the run the input was applied to.
	RunID     string
	RequestID string
	// Status is the run's MAP status after the input (StatusRunning, ...).
	Status string
}

// New builds an empty Module.
func New(cfg Config) (*Module, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Module{
		log:         lg.With("component", "runs"),
		events:      cfg.Events,
		origins:     cfg.Sessions,
		outboxLimit: cfg.OutboxLimit,
		runs:        map[string]*run{},
		notify:      make(chan struct{}),
	}, nil
}

// Name implements raftstore.Module.
func (m *Module) Name() string { return moduleName }

// Handlers implements raftstore.Module.
func (m *Module) Handlers() map[concordv1.CommandType]raftstore.Handler {
	return map[concordv1.CommandType]raftstore.Handler{
		concordv1.CommandType_COMMAND_TYPE_RUN_INPUT: {
			New:   func() proto.Message { return &concordv1.RunInput{} },
			Apply: m.apply,
		},
	}
}

// apply applies one RUN_INPUT. The same check as Check runs first, so an
// input refused here was refusable before proposing; a refused input (an
// *Error value) leaves every run unchanged.
func (m *Module) apply(index uint64, msg proto.Message) (any, error) {
	in, ok := msg.(*concordv1.RunInput)
	if !ok {
		panic(fmt.Sprintf("runs: unexpected message type %T", msg))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(in); err != nil {
		return nil, err
	}
	if in.GetForget() != nil {
		return m.applyForget(in.GetRunId()), nil
	}
	var (
		r   *run
		fx  []consensus.Effect
		err error
	)
	if in.GetStart() != nil {
		r, fx, err = m.applyStart(index, in)
	} else {
		r, fx, err = m.applyStep(in)
	}
	if err != nil {
		return nil, err
	}
	evs, drv := r.absorb(fx, r.lastAt)
	if mapEvents := r.recordEvents(evs); len(mapEvents) > 0 {
		m.events.AppendEvents(index, mapEvents)
	}
	if m.out != nil && len(drv) > 0 {
		m.out.push(work{runID: r.id, fx: drv}, m.outboxLimit)
	}
	m.wake()
	return &Applied{RunID: r.id, RequestID: r.requestID, Status: r.status()}, nil
}

func (m *Module) applyStart(index uint64, in *concordv1.RunInput) (*run, []consensus.Effect, error) {
	req, err := consensus.ParseRequest(in.GetStart().GetRequestJson())
	if err != nil {
		return nil, nil, err // *consensus.ValidationError, a value
	}
	at := in.GetTimeMs()
	st, fx, err := consensus.NewState(consensus.Start(at, in.GetRunId(), req))
	if err != nil {
		return nil, nil, err
	}
	r := newRun(in.GetRunId(), st, in.GetSource(), at, index)
	m.runs[r.id] = r
	i, _ := slices.BinarySearch(m.ids, r.id)
	m.ids = slices.Insert(m.ids, i, r.id)
	return r, fx, nil
}

func (m *Module) applyStep(in *concordv1.RunInput) (*run, []consensus.Effect, error) {
	r := m.runs[in.GetRunId()]
	at := max(in.GetTimeMs(), r.lastAt)
	ein, err := engineInput(in, at)
	if err != nil {
		// Bytes no proposer writes: refused alike on every replica.
		return nil, nil, errf(ErrInvalidInput, map[string]any{"reason": err.Error(), "runId": r.id})
	}
	fx, err := r.st.Apply(ein) // in place: r.st is this replica's run state
	if err != nil {
		if errors.Is(err, consensus.ErrIgnored) {
			// check() mirrors the engine's rules, so this is a rule the
			// module does not model. A timer the engine no longer knows is
			// forgotten so no later leader fires it again.
			if tf := in.GetTimerFired(); tf != nil {
				delete(r.timers, tf.GetTimerId())
			}
			return nil, nil, errf(ErrTaskUnknown, map[string]any{"reason": err.Error(), "runId": r.id})
		}
		// An engine invariant violation: deterministic, so every replica
		// refuses the same input.
		m.log.Error("engine refused input", "run_id", r.id, "err", err)
		return nil, nil, fmt.Errorf("runs: engine: %w", err)
	}
	r.lastAt = at
	if tf := in.GetTimerFired(); tf != nil {
		// The engine consumed the timer; if it needs another it sets one
		// among fx (absorbed next), so no later leader fires this again.
		delete(r.timers, tf.GetTimerId())
	}
	return r, fx, nil
}

// engineInput converts a non-start RUN_INPUT (already checked) to the
// engine's input at time at. A round result parsed at the edge is decoded
// from its binary form; its bytes come from the log, so a corrupt one is an
// error, not a panic.
func engineInput(in *concordv1.RunInput, at int64) (consensus.Input, error) {
	switch x := in.GetInput().(type) {
	case *concordv1.RunInput_TaskResult:
		res := x.TaskResult
		if b := res.GetRoundResult(); len(b) > 0 {
			rr, err := consensus.DecodeRoundResult(b)
			if err != nil {
				return consensus.Input{}, err
			}
			return consensus.TaskRoundResult(at, res.GetTaskId(), res.GetParticipantId(), rr), nil
		}
		return consensus.TaskResult(at, res.GetTaskId(), res.GetParticipantId(), res.GetOutputJson()), nil
	case *concordv1.RunInput_TaskFailed:
		f := x.TaskFailed
		return consensus.TaskFailed(at, f.GetTaskId(), f.GetParticipantId(), consensus.FailureKind(f.GetKind()), f.GetReason()), nil
	case *concordv1.RunInput_TimerFired:
		return consensus.TimerFired(at, x.TimerFired.GetTimerId()), nil
	case *concordv1.RunInput_Cancel:
		return consensus.Cancel(at, x.Cancel.GetReason()), nil
	}
	return consensus.Input{}, nil
}

// Check reports the error Apply would return for in against this replica's
// current state, or nil, without changing anything. Proposers call it
// before proposing so a refused input never reaches the log. On a follower
// the replica may lag: see Service for how that is handled.
func (m *Module) Check(in *concordv1.RunInput) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.check(in)
}

// check mirrors the engine's reasons to ignore an input (consensus
// DESIGN.md §1) with the module's own bookkeeping. Callers hold m.mu.
func (m *Module) check(in *concordv1.RunInput) error {
	if m.origins != nil {
		// First, as the registry's own session writes: whatever else the
		// reply would meet, its connection no longer holds the session.
		if err := m.origins.CheckOrigin(in.GetOriginSessionId(), in.GetOriginSessionEpoch()); err != nil {
			return err
		}
	}
	id := in.GetRunId()
	if id == "" || in.GetInput() == nil {
		return errf(ErrInvalidInput, map[string]any{"reason": "run_id and an input are required"})
	}
	r := m.runs[id]
	if st := in.GetStart(); st != nil {
		if r != nil {
			return errf(ErrRunExists, map[string]any{"runId": id})
		}
		if len(st.GetRequestJson()) == 0 {
			return errf(ErrInvalidInput, map[string]any{"reason": "request_json is required"})
		}
		return nil
	}
	if r == nil {
		return notFound(id)
	}
	if in.GetForget() != nil {
		if !r.st.Done() {
			return errf(ErrInvalidInput, map[string]any{"reason": "only a finished run can be forgotten", "runId": id})
		}
		return nil
	}
	if in.GetCancel() != nil {
		if r.st.Done() {
			return errf(ErrRunFinished, map[string]any{"runId": id, "status": r.status()})
		}
		return nil
	}
	if tf := in.GetTimerFired(); tf != nil {
		return r.checkTimer(tf.GetTimerId(), max(in.GetTimeMs(), r.lastAt))
	}
	var taskID, pid string
	if res := in.GetTaskResult(); res != nil {
		taskID, pid = res.GetTaskId(), res.GetParticipantId()
	} else {
		f := in.GetTaskFailed()
		taskID, pid = f.GetTaskId(), f.GetParticipantId()
		switch consensus.FailureKind(f.GetKind()) {
		case consensus.FailTimeout, consensus.FailError, consensus.FailDispatch, consensus.FailAwait:
		default:
			return errf(ErrInvalidInput, map[string]any{"reason": "unknown failure kind " + f.GetKind()})
		}
		if pid == "" {
			return r.checkTask(taskID, "")
		}
	}
	return r.checkTask(taskID, pid)
}

// checkTask: the task must be outstanding and, when pid is given, be
// pid's.
func (r *run) checkTask(taskID, pid string) error {
	t := r.taskByID[taskID]
	switch {
	case t == nil && r.st.Done():
		return taskErr(ReasonRunFinished, taskID)
	case t == nil:
		return taskErr(ReasonUnknownTask, taskID)
	case !t.outstanding:
		return taskErr(ReasonAlreadySettled, taskID)
	case pid != "" && pid != t.pid:
		return errf(ErrPermissionDenied, map[string]any{"reason": ReasonWrongAgent, "taskId": taskID})
	}
	return nil
}

func (r *run) checkTimer(id string, at int64) error {
	t, ok := r.timers[id]
	switch {
	case r.st.Done():
		return taskErr(ReasonRunFinished, id)
	case !ok:
		return taskErr(ReasonUnknownTimer, id)
	case at < t.at:
		return taskErr(ReasonTimerNotDue, id)
	}
	return nil
}

// wake closes the channel changed handed out and replaces it. Callers
// hold m.mu for writing.
func (m *Module) wake() {
	close(m.notify)
	m.notify = make(chan struct{})
}

// changed returns a channel closed at the next applied input.
func (m *Module) changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.notify
}
