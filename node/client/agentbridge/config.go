package agentbridge

import (
	"fmt"
	"log/slog"
	"time"
)

// Wire names of the runs protocol (node/runs/PROTOCOL.md).
const (
	// TaskMessageType is payload.type of a task message.
	TaskMessageType = "x-concord.run.task"
	// TaskCancelledType is payload.type of the notice that the engine no
	// longer waits for a task: the bridge cancels the work on it.
	TaskCancelledType = "x-concord.run.task_cancelled"
	// DefaultServiceID is the service agents reply to.
	DefaultServiceID = "concord.runs"
)

// Config configures a Bridge.
type Config struct {
	// AgentID is the agent this process registers and answers as; it must
	// be the participant id used in run requests.
	AgentID string
	// Name and Role are the agent's display name and role (optional).
	Name string
	Role string
	// Handler computes answers (ExecHandler, persona, script).
	Handler Handler
	// Concurrency is how many tasks are handled at once.
	Concurrency int
	// QueueLimit is how many more tasks may wait for a free slot; a task
	// beyond that is answered at once with an error payload ("overloaded")
	// rather than left to time out.
	QueueLimit int
	// TaskTimeout bounds one task when its message carries no deadline;
	// when it does, the earlier of the two wins.
	TaskTimeout time.Duration
	// ReplyTimeout is how long a reply may keep retrying (through a
	// reconnect) after the task's deadline, and how long Run waits for
	// in-flight replies when it stops.
	ReplyTimeout time.Duration
	// ServiceID is the id replies are sent to.
	ServiceID string
	// DoneCacheSize is how many answered tasks are remembered, so that a
	// task re-sent by a new leader gets the same answer again instead of
	// a second run of the command.
	DoneCacheSize int
	// MaxErrorBytes caps the error text of an error payload.
	MaxErrorBytes int
	// Logger receives the bridge's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns production values; AgentID and Handler must be set.
func DefaultConfig() Config {
	return Config{
		Concurrency:   4,
		QueueLimit:    64,
		TaskTimeout:   20 * time.Minute, // argue's default per-task timeout
		ReplyTimeout:  10 * time.Second,
		ServiceID:     DefaultServiceID,
		DoneCacheSize: 1024,
		MaxErrorBytes: 4096,
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(f, a...)) }
	switch {
	case c.AgentID == "":
		return bad("AgentID is required")
	case c.Handler == nil:
		return bad("Handler is required")
	case c.Concurrency < 1:
		return bad("Concurrency must be >= 1")
	case c.QueueLimit < 0:
		return bad("QueueLimit must be >= 0")
	case c.TaskTimeout <= 0 || c.ReplyTimeout <= 0:
		return bad("TaskTimeout and ReplyTimeout must be > 0")
	case c.ServiceID == "":
		return bad("ServiceID is required")
	case c.DoneCacheSize < 0 || c.MaxErrorBytes < 64:
		return bad("DoneCacheSize must be >= 0 and MaxErrorBytes >= 64")
	}
	return nil
}
