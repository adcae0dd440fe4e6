package argueclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/consensus/local"
)

// Run statuses as `concord argue` reports them (node/runs uses the same).
const (
	StatusRunning   = "running"
	StatusFinished  = "finished"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// cancelledCode is the engine's failure code of a cancelled run.
const cancelledCode = "Cancelled"

// LocalOptions configures RunLocal.
type LocalOptions struct {
	// Request is the validated start request.
	Request *consensus.Request
	// Script, when set, answers for the participants it names (and for the
	// others too when it enables its persona); nil gives every participant
	// the consensus persona.
	Script *consensus.Script
	// WallClock runs agents concurrently with real timers. The default is
	// the engine's virtual clock: agents answer one at a time in dispatch
	// order, timers fire instantly in virtual time, and the run is
	// deterministic (same request, session id and start time give the same
	// bytes) and takes milliseconds. Personas answer at once, so the
	// virtual clock loses nothing for them; pick the wall clock for scripts
	// whose agents really take time.
	WallClock bool
	// SessionID is the run id; "" picks a fresh ULID.
	SessionID string
	// StartMs starts the virtual clock (ms since the epoch); 0 means now, so
	// event times look like the wall clock's.
	StartMs int64
	// OutDir is the artifact base directory: files go to
	// OutDir/<requestId>/.
	OutDir string
	// Progress, when set, renders each event as it is emitted.
	Progress *Progress
	// Logger receives the engine driver's debug logs; nil discards them.
	Logger *slog.Logger
}

// Outcome is what a finished run produced.
type Outcome struct {
	RunID     string
	RequestID string
	// Status is finished, failed or cancelled.
	Status  string
	Result  *consensus.Result
	Failure *consensus.Failure
	// Dir holds events.jsonl, result.json (when the run has a result) and
	// summary.md.
	Dir string
}

// Err returns nil for a finished run and a wrapped ErrRunFailed or
// ErrRunCancelled otherwise, for the exit code.
func (o *Outcome) Err() error {
	switch {
	case o.Status == StatusCancelled:
		return fmt.Errorf("%w: run %s: %s", ErrRunCancelled, o.RunID, failureText(o.Failure))
	case o.Status != StatusFinished:
		return fmt.Errorf("%w: run %s: %s", ErrRunFailed, o.RunID, failureText(o.Failure))
	}
	return nil
}

func failureText(f *consensus.Failure) string {
	if f == nil {
		return "no failure details"
	}
	return f.Code + ": " + f.Message
}

// statusOf classifies an engine outcome.
func statusOf(f *consensus.Failure) string {
	switch {
	case f == nil:
		return StatusFinished
	case f.Code == cancelledCode:
		return StatusCancelled
	}
	return StatusFailed
}

// RunLocal runs the request in process with consensus/local's Run (no
// cluster), renders progress and writes the artifacts. A run that ends
// failed or cancelled (Ctrl-C cancels it) still writes its files and
// returns its Outcome, together with Outcome.Err().
func RunLocal(ctx context.Context, opts LocalOptions) (*Outcome, error) {
	if opts.Request == nil {
		return nil, fmt.Errorf("%w: no request", ErrInvalidRequest)
	}
	sid := opts.SessionID
	if sid == "" {
		sid = ulid.Make().String()
	}
	lo := local.Options{SessionID: sid, StartMs: opts.StartMs, Logger: opts.Logger}
	if opts.WallClock {
		lo.Clock = local.WallClock{}
	} else if lo.StartMs == 0 {
		lo.StartMs = time.Now().UnixMilli()
	}
	if opts.Progress != nil {
		lo.OnEvent = opts.Progress.Event
	}
	var dir consensus.Directory = personaDirectory{agent: consensus.Persona{}.Agent()}
	if opts.Script != nil {
		dir = opts.Script
	}
	run, err := local.Run(ctx, opts.Request, dir, lo)
	if run == nil {
		return nil, fmt.Errorf("local run: %w", err)
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("local run: %w", err)
	}
	out := &Outcome{RunID: sid, RequestID: opts.Request.RequestID, Status: statusOf(run.Failure),
		Result: run.Result, Failure: run.Failure, Dir: outDirFor(opts.OutDir, opts.Request.RequestID)}
	if err := local.WriteArtifacts(out.Dir, run.Result, run.Failure, run.Events); err != nil {
		return out, fmt.Errorf("write artifacts: %w", err)
	}
	return out, out.Err()
}

// LoadScript reads the answers file at path for LocalOptions.Script.
func LoadScript(path string) (*consensus.Script, error) { return local.LoadScriptFile(path) }

// personaDirectory gives every participant the same persona agent.
type personaDirectory struct{ agent consensus.Agent }

func (p personaDirectory) Agent(string) (consensus.Agent, bool) { return p.agent, true }
