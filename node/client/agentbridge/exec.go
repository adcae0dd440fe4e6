package agentbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ExecConfig configures an ExecHandler.
type ExecConfig struct {
	// Command is run with `sh -c`; it gets the task JSON on stdin and must
	// print its answer (a JSON object, possibly inside prose or a ```json
	// fence) on stdout.
	Command string
	// Shell runs Command ("/bin/sh" style, invoked as Shell -c Command).
	Shell string
	// MaxOutputBytes caps what is kept of stdout; a command printing more
	// fails the task (a truncated answer would not parse anyway). The
	// engine accepts results up to consensus.MaxOutputBytes, and prose
	// around the JSON needs room too.
	MaxOutputBytes int64
	// StderrTailBytes is how much of the end of stderr is quoted in the
	// error of a failed command.
	StderrTailBytes int
	// WaitDelay bounds how long to wait for the output pipes after the
	// process group was killed (a daemonised grandchild holding them).
	WaitDelay time.Duration
	// Env is added to the command's environment (KEY=VALUE).
	Env []string
}

// DefaultExecConfig returns production values; Command must be set.
func DefaultExecConfig() ExecConfig {
	return ExecConfig{Shell: "/bin/sh", MaxOutputBytes: 8 << 20, StderrTailBytes: 2048, WaitDelay: 2 * time.Second}
}

// Validate reports the first invalid field.
func (c ExecConfig) Validate() error {
	switch {
	case strings.TrimSpace(c.Command) == "":
		return fmt.Errorf("%w: exec: Command is required", ErrInvalidConfig)
	case c.Shell == "":
		return fmt.Errorf("%w: exec: Shell is required", ErrInvalidConfig)
	case c.MaxOutputBytes <= 0 || c.StderrTailBytes < 0 || c.WaitDelay <= 0:
		return fmt.Errorf("%w: exec: MaxOutputBytes and WaitDelay must be > 0", ErrInvalidConfig)
	}
	return nil
}

// ExecHandler runs a command per task. The command runs in its own process
// group; when the task's deadline passes, the whole group is killed (an
// LLM CLI's children included).
type ExecHandler struct{ cfg ExecConfig }

// NewExecHandler validates cfg and returns the handler.
func NewExecHandler(cfg ExecConfig) (*ExecHandler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ExecHandler{cfg: cfg}, nil
}

// Handle implements Handler.
func (h *ExecHandler) Handle(ctx context.Context, t *Task) (json.RawMessage, error) {
	stdout := &capBuffer{limit: h.cfg.MaxOutputBytes}
	stderr := &tailBuffer{limit: h.cfg.StderrTailBytes}
	cmd := exec.CommandContext(ctx, h.cfg.Shell, "-c", h.cfg.Command)
	setProcessGroup(cmd)
	cmd.Cancel = func() error { return killProcessGroup(cmd) }
	cmd.WaitDelay = h.cfg.WaitDelay
	cmd.Stdin = strings.NewReader(string(t.Raw))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), h.cfg.Env...)
	cmd.Env = append(cmd.Env, "CONCORD_TASK_ID="+t.ID, "CONCORD_RUN_ID="+t.RunID,
		"CONCORD_TASK_KIND="+string(t.Kind), "CONCORD_PARTICIPANT_ID="+t.ParticipantID,
		"CONCORD_PHASE="+string(t.Phase), "CONCORD_ROUND="+strconv.Itoa(t.Round))
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w after %s: process group killed (%w)", ErrTimeout, took, ctx.Err())
	case stdout.overflow:
		return nil, fmt.Errorf("%w: more than %d bytes on stdout", ErrOutputTooLarge, h.cfg.MaxOutputBytes)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%w: exit status %d%s", ErrCommandFailed, ee.ExitCode(), stderr.quote())
		}
		return nil, fmt.Errorf("%w: %w%s", ErrCommandFailed, err, stderr.quote())
	}
	obj, err := ExtractJSON(stdout.buf)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, stderr.quote())
	}
	return Envelope(t, obj)
}

// capBuffer keeps the first limit bytes written and drops the rest, so the
// process never blocks on a full pipe and memory stays bounded.
type capBuffer struct {
	buf      []byte
	limit    int64
	overflow bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.limit - int64(len(b.buf))
	switch {
	case room <= 0:
		b.overflow = b.overflow || len(p) > 0
	case int64(len(p)) > room:
		b.buf = append(b.buf, p[:room]...)
		b.overflow = true
	default:
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

// tailBuffer keeps the last limit bytes written.
type tailBuffer struct {
	buf   []byte
	limit int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) quote() string {
	s := strings.TrimSpace(string(b.buf))
	if s == "" {
		return ""
	}
	return "; stderr: " + s
}
