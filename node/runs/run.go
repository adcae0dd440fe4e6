package runs

import (
	"encoding/json"
	"slices"

	"github.com/concordmap/concord/consensus"
)

// Run statuses as MAP shows them.
const (
	StatusRunning   = "running"
	StatusFinished  = "finished"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// cancelledCode is the engine's failure code for a cancelled run.
const cancelledCode = "Cancelled"

// Phases the summary reports besides the engine's round phases.
const (
	phaseReport = "report"
	phaseAction = "action"
)

// run is one replicated run: the engine state plus the bookkeeping the
// module derives from the effects of each Step (which the engine does not
// expose: pending timers, the dispatched tasks and their status, the event
// list). Everything here is replicated (snapshotted) or derived from
// replicated data, identically on every replica. Guarded by Module.mu.
type run struct {
	id         string
	st         *consensus.State
	requestID  string
	startedBy  string
	startedAt  int64
	finishedAt int64
	lastAt     int64
	startIndex uint64

	events   []runEvent // append-only: entries are never modified
	timers   map[string]timerEntry
	tasks    []*taskEntry // dispatch order
	taskByID map[string]*taskEntry

	// Derived from events and the state (rebuilt by Restore).
	phase        string
	round        int
	eliminations []consensus.Elimination
	result       *consensus.Result
	failure      *consensus.Failure
	// frozen is the engine state's encoding once the run is over (it never
	// changes again), so snapshots do not re-encode finished runs.
	frozen []byte
}

// runEvent is one engine event; payload is its JSON.
type runEvent struct {
	seq     int64
	atMs    int64
	at      string
	typ     string
	payload json.RawMessage
	id      string // the MAP event's id in the registry window
}

type timerEntry struct {
	kind string
	at   int64
}

type taskEntry struct {
	id          string
	pid         string
	kind        string
	timeoutAt   int64
	outstanding bool
}

func newRun(id string, st *consensus.State, startedBy string, at int64, index uint64) *run {
	return &run{
		id: id, st: st, requestID: st.Request().RequestID, startedBy: startedBy,
		startedAt: at, lastAt: at, startIndex: index,
		timers: map[string]timerEntry{}, taskByID: map[string]*taskEntry{},
	}
}

// status is the MAP status of the run.
func (r *run) status() string {
	switch {
	case !r.st.Done():
		return StatusRunning
	case r.st.Lifecycle() == consensus.LifeFinished:
		return StatusFinished
	case r.failure != nil && r.failure.Code == cancelledCode:
		return StatusCancelled
	}
	return StatusFailed
}

// participantIDs lists the run's participants in request order.
func (r *run) participantIDs() []string {
	ps := r.st.Request().Participants
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// involves reports whether id is a participant, the reporter or the actor
// of the run (someone the engine may send a task to).
func (r *run) involves(id string) bool {
	req := r.st.Request()
	if slices.ContainsFunc(req.Participants, func(p consensus.Participant) bool { return p.ID == id }) {
		return true
	}
	if req.ReportPolicy.RepresentativeID == id {
		return true
	}
	return req.ActionPolicy != nil && req.ActionPolicy.ActorID == id
}

// absorb records the bookkeeping side of one Step's effects, in order, and
// returns the events it produced (for the registry window) and the effects
// the leader's driver must perform.
func (r *run) absorb(fx []consensus.Effect, at int64) (evs []*consensus.Event, drv []consensus.Effect) {
	for _, e := range fx {
		switch e := e.(type) {
		case consensus.EmitEvent:
			evs = append(evs, e.Event)
			continue
		case consensus.DispatchTask:
			t := &taskEntry{id: e.Task.ID, pid: e.Task.ParticipantID, kind: string(e.Task.Kind),
				timeoutAt: e.Task.TimeoutAt, outstanding: true}
			r.tasks = append(r.tasks, t)
			r.taskByID[t.id] = t
		case consensus.SetTimer:
			r.timers[e.ID] = timerEntry{kind: string(e.Kind), at: e.At}
		case consensus.ClearTimer:
			delete(r.timers, e.ID)
			// Every settlement of a task clears the task's own timer (its
			// id is the task id): that is how the module learns that the
			// engine stopped waiting for the task.
			r.settle(e.ID)
		case consensus.CancelTask:
			r.settle(e.TaskID)
		case consensus.Finish:
			r.result, r.failure, r.finishedAt = e.Result, e.Failure, at
			clear(r.timers)
			for _, t := range r.tasks {
				t.outstanding = false
			}
		}
		drv = append(drv, e)
	}
	return evs, drv
}

func (r *run) settle(taskID string) {
	if t := r.taskByID[taskID]; t != nil {
		t.outstanding = false
	}
}

// observe updates the fields derived from events (phase, round,
// eliminations). It reads the payload JSON so that Restore derives exactly
// what Apply did.
func (r *run) observe(ev *runEvent) {
	switch ev.typ {
	case consensus.EventRoundDispatched:
		var p struct {
			Phase string `json:"phase"`
			Round int    `json:"round"`
		}
		if json.Unmarshal(ev.payload, &p) == nil {
			r.phase, r.round = p.Phase, p.Round
		}
	case consensus.EventReportDispatched:
		r.phase = phaseReport
	case consensus.EventActionDispatched:
		r.phase = phaseAction
	case consensus.EventParticipantEliminated:
		var p consensus.ParticipantEliminatedPayload
		if json.Unmarshal(ev.payload, &p) == nil {
			r.eliminations = append(r.eliminations, consensus.Elimination{
				ParticipantID: p.ParticipantID, Round: p.Round, Reason: p.Reason, At: ev.at})
		}
	}
}
