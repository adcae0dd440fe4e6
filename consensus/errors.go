package consensus

import (
	"errors"
	"strings"
)

var (
	// ErrInvalidRequest is matched (errors.Is) by every *ValidationError: the
	// start request was refused and no run was created.
	ErrInvalidRequest = errors.New("consensus: invalid request")
	// ErrIgnored is matched by every *IgnoredError: the input did not change
	// the state (unknown or settled task, timer not due, run already over).
	ErrIgnored = errors.New("consensus: input ignored")
	// ErrNoRun is returned by (*State).Apply on a nil state and by NewState
	// for an input that is not a start input.
	ErrNoRun = errors.New("consensus: no run state")
	// ErrCorruptState is returned by DecodeState for malformed bytes.
	ErrCorruptState = errors.New("consensus: corrupt state encoding")
	// ErrUnsupportedVersion is returned by DecodeState for an encoding version
	// newer than this binary understands.
	ErrUnsupportedVersion = errors.New("consensus: unsupported state encoding version")
	// ErrNoAgent is returned by the local driver when a task names a
	// participant that has no agent.
	ErrNoAgent = errors.New("consensus: no agent for participant")
	// ErrNoAnswer is returned by a scripted agent that has no answer for a task.
	ErrNoAnswer = errors.New("consensus: no scripted answer")
	// ErrInvalidAnswers is returned when an answers file cannot be used.
	ErrInvalidAnswers = errors.New("consensus: invalid answers file")
)

// FieldError is one problem with a start request. Path is a JSON path such as
// `roundPolicy.maxRounds` or `participants[1].id` ("" means the document root).
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// ValidationError lists every problem found in a start request, in a
// deterministic order. A MAP server maps it to JSON-RPC -32602 with Errors as
// the error data.
type ValidationError struct {
	Errors []FieldError `json:"errors"`
}

// Error implements error.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("consensus: invalid request: ")
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		if fe.Path != "" {
			b.WriteString(fe.Path)
			b.WriteString(": ")
		}
		b.WriteString(fe.Message)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidRequest }

// IgnoredError says why an input left the state unchanged. Replicas ignore
// the same inputs for the same reason, so a caller may safely refuse them.
type IgnoredError struct {
	Reason string
}

// Error implements error.
func (e *IgnoredError) Error() string { return "consensus: input ignored: " + e.Reason }

// Is makes errors.Is(err, ErrIgnored) true.
func (e *IgnoredError) Is(target error) bool { return target == ErrIgnored }

func ignored(reason string) error { return &IgnoredError{Reason: reason} }
