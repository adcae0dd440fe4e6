package runs

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/internal/storeerr"
	"github.com/concordmap/concord/node/rpc"
)

// MAP error codes returned by this package (map-protocol.md §6; the
// experimental range starts at 90000). They are wire numbers.
const (
	CodeRunNotFound      = 90000 // RUN_NOT_FOUND
	CodeRunFinished      = 90001 // RUN_FINISHED
	CodeTaskUnknown      = 90002 // RUN_TASK_UNKNOWN
	CodeInvalidRequest   = rpc.CodeInvalidRequest
	CodeInvalidParams    = rpc.CodeInvalidParams
	CodePermissionDenied = rpc.CodePermissionDenied
	CodeAgentNotFound    = rpc.CodeAgentNotFound
)

// Reasons carried in details.reason of the errors above.
const (
	ReasonUnknownTask    = "unknown_task"
	ReasonAlreadySettled = "already_settled"
	ReasonRunFinished    = "run_finished"
	ReasonWrongAgent     = "wrong_agent"
	ReasonNotParticipant = "not_participant"
	ReasonTimerNotDue    = "timer_not_due"
	ReasonUnknownTimer   = "unknown_timer"
)

// Error is a domain error: an input refused for the run's current state.
// Apply returns it as a value (the entry is committed, nothing changes) and
// Check returns the same value before anything is proposed. The MAP layer
// answers with Code, Message and Details unchanged.
type Error struct {
	Code    int
	Message string
	Details map[string]any
}

// Error implements error.
func (e *Error) Error() string {
	s := "runs: " + e.Message + " (" + strconv.Itoa(e.Code) + ")"
	if r, ok := e.Details["reason"].(string); ok {
		s += ": " + r
	}
	return s
}

// Is reports whether target is an *Error with the same code, so
// errors.Is(err, ErrRunNotFound) matches whatever the details.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is; the package returns *Error values with these
// codes and specific details.
var (
	// ErrRunNotFound: no run with that id on this replica.
	ErrRunNotFound = &Error{Code: CodeRunNotFound, Message: "Run not found"}
	// ErrRunFinished: cancel (or another input) for a run that is over.
	ErrRunFinished = &Error{Code: CodeRunFinished, Message: "Run already finished"}
	// ErrTaskUnknown: a reply or timer for a task the run is not waiting
	// for (details.reason unknown_task, already_settled, run_finished,
	// timer_not_due, unknown_timer).
	ErrTaskUnknown = &Error{Code: CodeTaskUnknown, Message: "Run task unknown"}
	// ErrPermissionDenied: a reply from an agent that does not own the task.
	ErrPermissionDenied = &Error{Code: CodePermissionDenied, Message: "Permission denied"}
	// ErrInvalidInput: a malformed RUN_INPUT (a proposer bug) or an invalid
	// start request.
	ErrInvalidInput = &Error{Code: CodeInvalidParams, Message: "Invalid params"}
	// ErrRunExists: a start for a run id that already exists.
	ErrRunExists = &Error{Code: CodeInvalidRequest, Message: "Run already exists"}

	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("runs: invalid config")
	// ErrSnapshotFormat is returned by Restore for records it cannot read.
	ErrSnapshotFormat = errors.New("runs: bad snapshot")
)

// errf builds an *Error from a sentinel with details.
func errf(base *Error, details map[string]any) *Error {
	return &Error{Code: base.Code, Message: base.Message, Details: details}
}

func taskErr(reason, taskID string) *Error {
	return errf(ErrTaskUnknown, map[string]any{"reason": reason, "taskId": taskID})
}

func notFound(runID string) *Error {
	return errf(ErrRunNotFound, map[string]any{"runId": runID})
}

// toRPC maps an error to the MAP error a participant sees: *Error keeps
// its code and details; a *consensus.ValidationError is -32602 with
// details.errors; a cluster without a leader (or a timeout) is a retryable
// 4000; anything else is returned as is (node/rpc answers -32603).
func toRPC(err error) error {
	if err == nil {
		return nil
	}
	var re *rpc.Error
	if errors.As(err, &re) {
		return re
	}
	var de *Error
	if errors.As(err, &de) {
		e := rpc.NewError(de.Code, de.Message)
		if len(de.Details) > 0 {
			e = e.WithDetails(de.Details)
		}
		return e
	}
	var ve *consensus.ValidationError
	if errors.As(err, &ve) {
		return invalidRequest(ve)
	}
	if e, ok := storeerr.Unavailable(err); ok {
		return e
	}
	return fmt.Errorf("runs: %w", err)
}

// invalidRequest renders a start request's field errors as -32602 with
// details.errors = [{path, message}].
func invalidRequest(ve *consensus.ValidationError) *rpc.Error {
	list := make([]map[string]string, len(ve.Errors))
	for i, fe := range ve.Errors {
		list[i] = map[string]string{"path": "request." + fe.Path, "message": fe.Message}
		if fe.Path == "" {
			list[i]["path"] = "request"
		}
	}
	msg := "Invalid params: request"
	if len(ve.Errors) > 0 {
		msg += ": " + list[0]["path"] + " " + ve.Errors[0].Message
	}
	return rpc.NewError(rpc.CodeInvalidParams, msg).WithDetails(map[string]any{"errors": list})
}
