package runs

import (
	"encoding/json"
	"slices"
	"sort"

	"github.com/concordmap/concord/consensus"
)

// Summary is a run as list, get and cancel show it (PROTOCOL.md).
type Summary struct {
	RunID              string                  `json:"runId"`
	RequestID          string                  `json:"requestId"`
	Status             string                  `json:"status"`
	Phase              string                  `json:"phase"`
	Round              int                     `json:"round"`
	Participants       []string                `json:"participants"`
	ActiveParticipants []string                `json:"activeParticipants"`
	Eliminations       []consensus.Elimination `json:"eliminations"`
	StartedBy          string                  `json:"startedBy,omitempty"`
	StartedAt          int64                   `json:"startedAt"`
	FinishedAt         int64                   `json:"finishedAt,omitempty"`
	Error              *consensus.Failure      `json:"error,omitempty"`
}

// Run is get's answer: the summary plus what include asked for.
type Run struct {
	Summary
	Result *consensus.Result `json:"result,omitempty"`
	Events []json.RawMessage `json:"events,omitempty"`
	State  *StateView        `json:"state,omitempty"`
}

// StateView is the driver-level state of a run (include "state").
type StateView struct {
	EventCount       int64       `json:"eventCount"`
	LastInputAt      int64       `json:"lastInputAt"`
	OutstandingTasks []TaskView  `json:"outstandingTasks"`
	Timers           []TimerView `json:"timers"`
}

// TaskView is one task the engine waits for.
type TaskView struct {
	TaskID        string `json:"taskId"`
	ParticipantID string `json:"participantId"`
	Kind          string `json:"kind"`
	TimeoutAt     int64  `json:"timeoutAt"`
}

// TimerView is one pending engine timer.
type TimerView struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	At   int64  `json:"at"`
}

// Include selects get's optional parts.
type Include struct {
	Result, Events, State bool
}

// Get returns a run from the local replica.
func (m *Module) Get(runID string, inc Include) (Run, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.runs[runID]
	if r == nil {
		return Run{}, false
	}
	out := Run{Summary: r.summary()}
	if inc.Result {
		out.Result = r.result
	}
	if inc.Events {
		out.Events = make([]json.RawMessage, len(r.events))
		for i := range r.events {
			out.Events[i] = r.engineEvent(&r.events[i])
		}
	}
	if inc.State {
		out.State = r.stateView()
	}
	return out, true
}

// List returns up to limit runs, newest first (run ids are ULIDs), with
// status (when not empty) and id < before (when not empty), and whether more
// match.
func (m *Module) List(status, before string, limit int) ([]Summary, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	end := len(m.ids)
	if before != "" {
		end = sort.SearchStrings(m.ids, before)
	}
	out := []Summary{}
	for i := end - 1; i >= 0; i-- {
		r := m.runs[m.ids[i]]
		if status != "" && r.status() != status {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, r.summary())
	}
	return out, false
}

// taskOwner returns the participant and kind (consensus.TaskKind) of an
// outstanding task, or the error a reply for it gets.
func (m *Module) taskOwner(runID, taskID string) (pid, kind string, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.runs[runID]
	if r == nil {
		return "", "", notFound(runID)
	}
	if err := r.checkTask(taskID, ""); err != nil {
		return "", "", err
	}
	t := r.taskByID[taskID]
	return t.pid, t.kind, nil
}

// involves reports whether agentID takes part in the run.
func (m *Module) involves(runID, agentID string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.runs[runID]
	return r != nil && r.involves(agentID)
}

func (r *run) summary() Summary {
	s := Summary{
		RunID: r.id, RequestID: r.requestID, Status: r.status(), Phase: r.phase, Round: r.round,
		Participants: r.participantIDs(), ActiveParticipants: r.st.ActiveParticipants(),
		Eliminations: slices.Clone(r.eliminations), StartedBy: r.startedBy,
		StartedAt: r.startedAt, FinishedAt: r.finishedAt, Error: r.failure,
	}
	if s.Eliminations == nil {
		s.Eliminations = []consensus.Elimination{}
	}
	return s
}

func (r *run) stateView() *StateView {
	v := &StateView{EventCount: r.st.EventCount(), LastInputAt: r.lastAt,
		OutstandingTasks: []TaskView{}, Timers: []TimerView{}}
	for _, t := range r.tasks {
		if t.outstanding {
			v.OutstandingTasks = append(v.OutstandingTasks, TaskView{TaskID: t.id, ParticipantID: t.pid,
				Kind: t.kind, TimeoutAt: t.timeoutAt})
		}
	}
	for id, t := range r.timers {
		v.Timers = append(v.Timers, TimerView{ID: id, Kind: t.kind, At: t.at})
	}
	slices.SortFunc(v.Timers, func(a, b TimerView) int {
		if a.At != b.At {
			return int(a.At - b.At)
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return v
}
