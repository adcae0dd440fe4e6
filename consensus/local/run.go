package local

import (
	"context"
	"log/slog"
	"time"

	"github.com/concordmap/concord/consensus"
)

// Clock tells the wall-clock driver the time in ms since the epoch.
type Clock interface{ NowMs() int64 }

// WallClock reads the system clock.
type WallClock struct{}

// NowMs implements Clock.
func (WallClock) NowMs() int64 { return time.Now().UnixMilli() }

// Options configures Run.
type Options struct {
	// SessionID is the run's session id ("local" when empty).
	SessionID string
	// Clock selects the wall-clock driver (agents run concurrently, timers
	// are real). When nil the run is consensus.Simulate's: a virtual clock,
	// agents called one at a time, fully deterministic.
	Clock Clock
	// StartMs is the virtual clock's start time (ms since the epoch).
	StartMs int64
	// OnEvent, when set, sees every event as it is emitted (from the
	// goroutine that called Run).
	OnEvent func(consensus.Event)
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// Run runs req to completion against agents, in process: on a real clock
// with concurrent agents when opts.Clock is set, else on Simulate's virtual
// clock. It returns an error for an invalid request, when ctx ends first
// (the run is then cancelled and still returned), or on an engine invariant
// violation.
func Run(ctx context.Context, req *consensus.Request, agents consensus.Directory, opts Options) (*consensus.Outcome, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "consensus_driver")
	onIgnored := func(err error) { log.Debug("input ignored", "err", err) }
	if opts.Clock == nil {
		return consensus.Simulate(ctx, req, agents, consensus.SimOptions{SessionID: opts.SessionID,
			StartMs: opts.StartMs, OnEvent: opts.OnEvent, OnIgnored: onIgnored})
	}
	sid := opts.SessionID
	if sid == "" {
		sid = "local"
	}
	w := &wall{agents: agents, clock: opts.Clock, tr: consensus.NewTracker(opts.OnEvent, onIgnored)}
	return w.run(ctx, consensus.Start(opts.Clock.NowMs(), sid, req))
}
