package registry

import (
	"errors"
	"fmt"
)

// MAP error codes carried by *Error (map-protocol.md §6). They are the wire
// numbers, so the MAP layer forwards Code unchanged.
const (
	CodeInvalidRequest = -32600
	CodeInvalidParams  = -32602
	CodeAuthFailed     = 1001
	CodeAgentNotFound  = 2001
	CodeScopeNotFound  = 2002
	CodeAgentExists    = 3000
	CodeStateInvalid   = 3001
	// CodeExhausted is MAP's retryable 4000; the registry uses it for a
	// resume, or a connection's write, whose session moved on
	// (ErrSessionMoved): a retry reads the session afresh.
	CodeExhausted = 4000
)

// Error is a domain error returned by Apply as a value: the command was
// valid Raft input but is refused for the current state. State is left
// unchanged. Code is the MAP error code; Field names the offending
// parameter for CodeInvalidParams.
type Error struct {
	Code    int
	Message string
	Field   string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("registry: %s (%s, code %d)", e.Message, e.Field, e.Code)
	}
	return fmt.Sprintf("registry: %s (code %d)", e.Message, e.Code)
}

// Is reports whether target is an *Error with the same code, so
// errors.Is(err, registry.ErrAgentNotFound) matches any agent-not-found
// error whatever its message.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// Sentinels for errors.Is; Apply returns *Error values with these codes and
// a specific message.
var (
	// ErrAgentNotFound: the agent (or a named parent) does not exist.
	ErrAgentNotFound = &Error{Code: CodeAgentNotFound, Message: "agent not found"}
	// ErrScopeNotFound: the scope (or a named parent scope) does not exist.
	ErrScopeNotFound = &Error{Code: CodeScopeNotFound, Message: "scope not found"}
	// ErrAgentExists: register with an id that is already registered.
	ErrAgentExists = &Error{Code: CodeAgentExists, Message: "agent already exists"}
	// ErrStateInvalid: a refused lifecycle transition or state value.
	ErrStateInvalid = &Error{Code: CodeStateInvalid, Message: "invalid state transition"}
	// ErrAuthFailed: a session resume presented a wrong resume token.
	ErrAuthFailed = &Error{Code: CodeAuthFailed, Message: "resume token mismatch"}
	// ErrInvalidParams: a command field is missing or malformed (a bug or
	// an unchecked client value in the proposer).
	ErrInvalidParams = &Error{Code: CodeInvalidParams, Message: "invalid params"}
	// ErrInvalidRequest: the command conflicts with state in a way MAP has
	// no code for (duplicate session or subscription id, unknown session).
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	// ErrSessionMoved: a resume, or a write a connection made for its
	// session, quoted an epoch the session has left (it was resumed
	// elsewhere, detached or closed since the proposer read it).
	// Retryable.
	ErrSessionMoved = &Error{Code: CodeExhausted, Message: "session moved on"}

	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("registry: invalid config")
	// ErrSnapshotFormat is returned by Restore for records it cannot read.
	ErrSnapshotFormat = errors.New("registry: bad snapshot")
	// ErrFSMLevelAhead is returned, with raftstore.ErrHalt, by the apply of
	// a SYSTEM_FSM_LEVEL record, or the Restore of a snapshot holding one,
	// whose level is above this build's (Config.BuildFSMLevel): the node was
	// downgraded in place below what the system relies on (levels.go).
	ErrFSMLevelAhead = errors.New("registry: the system's recorded FSM level is above this build's")
)

func errf(code int, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func agentNotFound(id string) *Error {
	return errf(CodeAgentNotFound, "", "agent %q not found", id)
}

func scopeNotFound(id string) *Error {
	return errf(CodeScopeNotFound, "", "scope %q not found", id)
}
