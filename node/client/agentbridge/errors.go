package agentbridge

import "errors"

var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("agentbridge: invalid config")
	// ErrNoJSON is returned by ExtractJSON when the output holds no JSON
	// object.
	ErrNoJSON = errors.New("agentbridge: no JSON object in output")
	// ErrBadTask is returned for a task message that cannot be decoded.
	ErrBadTask = errors.New("agentbridge: malformed task")
	// ErrBadAnswer is returned when a handler's answer is not a usable
	// result envelope (wrong kind, an explicit error answer, ...).
	ErrBadAnswer = errors.New("agentbridge: unusable answer")
	// ErrTimeout is returned when a task's handler ran past its deadline.
	ErrTimeout = errors.New("agentbridge: task timed out")
	// ErrOutputTooLarge is returned when a command printed more than
	// ExecConfig.MaxOutputBytes.
	ErrOutputTooLarge = errors.New("agentbridge: command output too large")
	// ErrCommandFailed is returned when a command exits with a non-zero
	// status or cannot be started.
	ErrCommandFailed = errors.New("agentbridge: command failed")
	// ErrUnknownPersona is returned for a persona style that does not exist.
	ErrUnknownPersona = errors.New("agentbridge: unknown persona style")
)
