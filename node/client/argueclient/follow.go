package argueclient

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/rpc"
)

// FollowConfig tunes how a run is followed.
type FollowConfig struct {
	// PollInterval is how often the run is re-read with get when no event
	// arrived (and how long a gap in the event sequence may last before it
	// is filled from get). Events normally arrive live; polling covers lost
	// notifications, subscription overflow and a server that lost them.
	PollInterval time.Duration
	// InboxLen bounds the live events buffered between the connection and
	// the renderer; an overflow is repaired from get.
	InboxLen int
}

// DefaultFollowConfig returns the values the CLI uses.
func DefaultFollowConfig() FollowConfig {
	return FollowConfig{PollInterval: 2 * time.Second, InboxLen: 4096}
}

// Follower receives a system's run events through a subscription and
// renders those of one run in sequence order, filling gaps from get.
type Follower struct {
	cfg      FollowConfig
	runs     Runs
	progress *Progress
	inbox    chan consensus.Event
	lost     atomic.Bool   // an event was dropped because the inbox was full
	kick     chan struct{} // a reconnect happened: re-read the run

	runID    string
	next     int64 // seq of the next event to render
	pending  map[int64]consensus.Event
	gapSince time.Time
	lastSeen time.Time
	terminal bool
}

// NewFollower returns a follower; progress may be nil (no output).
func NewFollower(cfg FollowConfig, runs Runs, progress *Progress) *Follower {
	return &Follower{cfg: cfg, runs: runs, progress: progress, inbox: make(chan consensus.Event, cfg.InboxLen),
		kick: make(chan struct{}, 1), pending: map[int64]consensus.Event{}}
}

// OnEvent is the subscription handler: it never blocks.
func (f *Follower) OnEvent(ev mapclient.Event) {
	e, ok := mapRunEvent(ev)
	if !ok {
		return
	}
	select {
	case f.inbox <- e:
	default:
		f.lost.Store(true)
	}
}

// OnReconnect is mapclient's reconnect hook: the next loop turn re-reads
// the run, since events may have been missed while disconnected. The
// notice is printed before the kick, so it comes before what the catch-up
// renders.
func (f *Follower) OnReconnect(mapclient.ReconnectInfo) {
	if f.progress != nil {
		f.progress.Printf("(reconnected; catching up)")
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Subscribe makes the run-event subscription; call it before starting a
// run so that no event is missed.
func (f *Follower) Subscribe(ctx context.Context, c *mapclient.Client) (*mapclient.Subscription, error) {
	return c.Subscribe(ctx, map[string]any{"filter": map[string]any{"eventTypes": []string{EventTypePrefix + "*"}}}, f.OnEvent)
}

// Follow renders runID's events until the run is over and returns the run
// with its result and full event list. done, when not nil, ends the wait
// early with its error (the client gave up reconnecting).
func (f *Follower) Follow(ctx context.Context, runID string, done <-chan struct{}, doneErr func() error) (*RunInfo, error) {
	f.runID, f.lastSeen = runID, time.Now()
	if err := f.catchUp(ctx); err != nil {
		return nil, err
	}
	tick := time.NewTicker(f.cfg.PollInterval / 2)
	defer tick.Stop()
	for !f.terminal {
		select {
		case ev := <-f.inbox:
			f.add(ev)
		case <-f.kick:
			if err := f.catchUp(ctx); err != nil {
				return nil, err
			}
		case <-tick.C:
			idle := time.Since(f.lastSeen) >= f.cfg.PollInterval
			gap := !f.gapSince.IsZero() && time.Since(f.gapSince) >= f.cfg.PollInterval
			if idle || gap || f.lost.Swap(false) {
				if err := f.catchUp(ctx); err != nil {
					return nil, err
				}
			}
		case <-done:
			return nil, fmt.Errorf("connection: %w", doneErr())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.final(ctx)
}

// add takes one live event and renders what became contiguous.
func (f *Follower) add(ev consensus.Event) {
	if ev.SessionID != f.runID || ev.Seq < f.next {
		return
	}
	f.lastSeen = time.Now()
	f.pending[ev.Seq] = ev
	f.flush()
}

func (f *Follower) flush() {
	for {
		ev, ok := f.pending[f.next]
		if !ok {
			break
		}
		delete(f.pending, f.next)
		f.next++
		f.render(ev)
	}
	switch {
	case len(f.pending) == 0:
		f.gapSince = time.Time{}
	case f.gapSince.IsZero():
		f.gapSince = time.Now()
	}
}

func (f *Follower) render(ev consensus.Event) {
	if f.progress != nil {
		f.progress.Event(ev)
	}
	if ev.Type == consensus.EventFinalized || ev.Type == consensus.EventFailed {
		f.terminal = true
	}
}

// catchUp re-reads the run's events and renders the ones not shown yet.
func (f *Follower) catchUp(ctx context.Context) error {
	info, err := f.runs.Get(ctx, f.runID, "events")
	if err != nil {
		return err
	}
	f.lastSeen = time.Now()
	evs, err := engineEvents(info.Events)
	if err != nil {
		return err
	}
	for _, ev := range evs[min(int(f.next), len(evs)):] {
		f.pending[ev.Seq] = ev
	}
	f.flush()
	if info.Status != StatusRunning {
		f.terminal = true
	}
	return nil
}

// final reads the finished run with its result and events, rendering any
// event still unseen.
func (f *Follower) final(ctx context.Context) (*RunInfo, error) {
	info, err := f.runs.Get(ctx, f.runID, "result", "events")
	if err != nil {
		return nil, err
	}
	if info.Status == StatusRunning {
		return nil, fmt.Errorf("%w: run %s still running after its final event", ErrBadResponse, f.runID)
	}
	evs, err := engineEvents(info.Events)
	if err != nil {
		return nil, err
	}
	for _, ev := range evs[min(int(f.next), len(evs)):] {
		f.pending[ev.Seq] = ev
	}
	f.flush()
	return info, nil
}

// Outcome turns a finished run into an Outcome and writes its artifacts
// under outDir/<requestId>/ (outDir "" writes nothing).
func (info *RunInfo) Outcome(outDir string) (*Outcome, error) {
	oc := &Outcome{RunID: info.RunID, RequestID: info.RequestID, Status: info.Status, Failure: info.Error}
	if hasValue(info.Result) {
		oc.Result = new(consensus.Result)
		if err := json.Unmarshal(info.Result, oc.Result); err != nil {
			return nil, fmt.Errorf("%w: result: %w", ErrBadResponse, err)
		}
	}
	if outDir == "" {
		return oc, nil
	}
	evs, err := engineEvents(info.Events)
	if err != nil {
		return nil, err
	}
	oc.Dir = outDirFor(outDir, info.RequestID)
	if err := writeRemoteArtifacts(oc.Dir, info.Result, info.Error, faithful(evs)); err != nil {
		return oc, fmt.Errorf("write artifacts: %w", err)
	}
	return oc, nil
}

// faithful swaps each raw payload for the engine's typed payload when that
// encodes to the same JSON value, so events.jsonl is written exactly as a
// local run writes it (Go's encoder HTML-escapes the server's bytes; the
// artifact writer does not).
func faithful(evs []consensus.Event) []consensus.Event {
	for i := range evs {
		raw, ok := evs[i].Payload.(json.RawMessage)
		if !ok {
			continue
		}
		typed := typedPayload(evs[i].Type, raw)
		if b, err := json.Marshal(typed); err == nil && sameJSON(raw, b) {
			evs[i].Payload = typed
		}
	}
	return evs
}

// IsRunNotFound reports whether err is the extension's RUN_NOT_FOUND.
func IsRunNotFound(err error) bool { return rpc.IsCode(err, CodeRunNotFound) }

// IsRunFinished reports whether err is the extension's RUN_FINISHED.
func IsRunFinished(err error) bool { return rpc.IsCode(err, CodeRunFinished) }
