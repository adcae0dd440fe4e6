package consensus

import "encoding/json"

// InputKind names an input to the reducer (NewState, Apply).
type InputKind uint8

// Input kinds. The numbers are persisted inside Raft log entries: never
// renumber them.
const (
	// InputStart creates a run from Request with SessionID.
	InputStart InputKind = 1
	// InputTaskResult delivers an agent's raw answer (round, report or action).
	InputTaskResult InputKind = 2
	// InputTaskFailed reports that a task timed out, failed, or could not be
	// dispatched or awaited (see FailureKind).
	InputTaskFailed InputKind = 3
	// InputTimer reports that a timer set by a SetTimer effect is due: a
	// per-task timer, a round timer, or the global deadline.
	InputTimer InputKind = 4
	// InputCancel stops the run; it ends as failed with code "Cancelled".
	InputCancel InputKind = 5
)

// FailureKind classifies an InputTaskFailed.
type FailureKind string

// Failure kinds. A round task that fails to dispatch fails the run (spec
// §20); any other round-task failure eliminates its participant.
const (
	FailTimeout  FailureKind = "timeout"
	FailError    FailureKind = "error"
	FailDispatch FailureKind = "dispatch_failed"
	FailAwait    FailureKind = "await_failed"
)

// Input is one event fed to Apply. Every input carries At, the time in
// milliseconds since the Unix epoch chosen by the proposer; the reducer reads
// no clock. Only the fields of its Kind are used.
type Input struct {
	Kind InputKind `json:"kind"`
	At   int64     `json:"at"`

	// Start.
	SessionID string   `json:"sessionId,omitempty"`
	Request   *Request `json:"request,omitempty"`

	// Task result / failure. ParticipantID is the sender as the transport saw
	// it; a result from anyone but the task's participant is ignored.
	TaskID        string          `json:"taskId,omitempty"`
	ParticipantID string          `json:"participantId,omitempty"`
	Output        json.RawMessage `json:"output,omitempty"`
	// Parsed, when set, is a round task's result already parsed at the
	// edge (ParseRoundResult); it replaces Output, which may then be empty.
	// A report or action task needs Output: Parsed alone is ignored there.
	Parsed  *RoundResult `json:"parsed,omitempty"`
	Failure FailureKind  `json:"failure,omitempty"`
	Error   string       `json:"error,omitempty"`

	// Timer.
	TimerID string `json:"timerId,omitempty"`

	// Cancel.
	Reason string `json:"reason,omitempty"`
}

// Start returns a start input.
func Start(at int64, sessionID string, req *Request) Input {
	return Input{Kind: InputStart, At: at, SessionID: sessionID, Request: req}
}

// TaskResult returns a task-result input carrying the agent's raw answer.
func TaskResult(at int64, taskID, participantID string, output json.RawMessage) Input {
	return Input{Kind: InputTaskResult, At: at, TaskID: taskID, ParticipantID: participantID, Output: output}
}

// TaskRoundResult returns a task-result input carrying a round result
// parsed at the edge. Apply keeps references to r's data: r must not change
// afterwards (a RoundResult never does).
func TaskRoundResult(at int64, taskID, participantID string, r *RoundResult) Input {
	return Input{Kind: InputTaskResult, At: at, TaskID: taskID, ParticipantID: participantID, Parsed: r}
}

// TaskFailed returns a task-failure input.
func TaskFailed(at int64, taskID, participantID string, kind FailureKind, msg string) Input {
	return Input{Kind: InputTaskFailed, At: at, TaskID: taskID, ParticipantID: participantID, Failure: kind, Error: msg}
}

// TimerFired returns the input for a due timer.
func TimerFired(at int64, timerID string) Input {
	return Input{Kind: InputTimer, At: at, TimerID: timerID}
}

// Cancel returns a cancel input.
func Cancel(at int64, reason string) Input {
	return Input{Kind: InputCancel, At: at, Reason: reason}
}

// Effect is something the caller must do after Apply: DispatchTask, SetTimer,
// ClearTimer, CancelTask, EmitEvent or Finish. Effects may share immutable
// data with the state; callers must not modify them.
type Effect interface{ isEffect() }

// DispatchTask asks the caller to send Task to its participant.
type DispatchTask struct{ Task *Task }

// TimerKind says what a timer bounds.
type TimerKind string

// Timer kinds.
const (
	TimerTask     TimerKind = "task"
	TimerRound    TimerKind = "round"
	TimerDeadline TimerKind = "deadline"
)

// SetTimer asks the caller to feed TimerFired(At', ID) once the clock reaches
// At (an absolute time in ms). Setting an existing ID replaces it.
type SetTimer struct {
	ID   string
	Kind TimerKind
	At   int64
}

// ClearTimer cancels a timer; clearing an unknown timer is a no-op.
type ClearTimer struct{ ID string }

// CancelTask tells the caller that the engine no longer waits for a task
// (best effort, like argue's delegate.cancel).
type CancelTask struct{ TaskID string }

// EmitEvent carries one event of the run's event stream.
type EmitEvent struct{ Event *Event }

// Finish ends the run: Result is set on success, Failure when it failed.
type Finish struct {
	Result  *Result
	Failure *Failure
}

func (DispatchTask) isEffect() {}
func (SetTimer) isEffect()     {}
func (ClearTimer) isEffect()   {}
func (CancelTask) isEffect()   {}
func (EmitEvent) isEffect()    {}
func (Finish) isEffect()       {}
