package argueclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/concordmap/concord/node/client/mapclient"
)

// Remote runs and follows runs on a Concord system.
type Remote struct {
	// Client is the connection template (URLs, timings, logger). The
	// participant type is set to client; OnReconnect is set per command.
	Client mapclient.Config
	Follow FollowConfig
	// Progress renders events; nil renders nothing.
	Progress *Progress
	// OutDir is the artifact base directory; "" writes no files.
	OutDir string
	// ConnectTimeout bounds the first connection (every URL tried, with
	// backoff, until it passes); 0 waits until ctx ends.
	ConnectTimeout time.Duration
}

// Dial connects as a MAP client. onReconnect may be nil.
func (r Remote) Dial(ctx context.Context, onReconnect func(mapclient.ReconnectInfo)) (*mapclient.Client, error) {
	cfg := r.Client
	cfg.ParticipantType = mapclient.TypeClient
	cfg.OnReconnect = onReconnect
	if r.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.ConnectTimeout)
		defer cancel()
	}
	return mapclient.Dial(ctx, cfg)
}

// close ends the connection, bounded so an unreachable server cannot hang
// the exit.
func closeClient(c *mapclient.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// Run subscribes to run events, starts the request, renders its progress
// until it is over and writes the artifacts. It returns the Outcome and
// Outcome.Err() (non-nil for a failed or cancelled run). When ctx ends
// first the run keeps going on the system; the error says how to watch it.
func (r Remote) Run(ctx context.Context, request json.RawMessage, requestID string) (*Outcome, error) {
	f := NewFollower(r.Follow, Runs{}, r.Progress)
	c, err := r.Dial(ctx, f.OnReconnect)
	if err != nil {
		return nil, err
	}
	defer closeClient(c)
	f.runs = Runs{C: c}
	if _, err := f.Subscribe(ctx, c); err != nil {
		return nil, fmt.Errorf("subscribe to run events: %w", err)
	}
	st, err := f.runs.Start(ctx, request, requestID)
	if err != nil {
		return nil, fmt.Errorf("start run: %w", err)
	}
	r.printf("run %s started (request %s) via %s", st.RunID, st.RequestID, c.Session().URL)
	return r.follow(ctx, c, f, st.RunID)
}

// Watch follows an existing run (its past events first) until it is over;
// artifacts are written when OutDir is set.
func (r Remote) Watch(ctx context.Context, runID string) (*Outcome, error) {
	f := NewFollower(r.Follow, Runs{}, r.Progress)
	c, err := r.Dial(ctx, f.OnReconnect)
	if err != nil {
		return nil, err
	}
	defer closeClient(c)
	f.runs = Runs{C: c}
	if _, err := f.Subscribe(ctx, c); err != nil {
		return nil, fmt.Errorf("subscribe to run events: %w", err)
	}
	return r.follow(ctx, c, f, runID)
}

func (r Remote) follow(ctx context.Context, c *mapclient.Client, f *Follower, runID string) (*Outcome, error) {
	info, err := f.Follow(ctx, runID, c.Done(), c.Err)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("stopped following run %s (it keeps running; `concord argue watch %s` resumes, `concord argue cancel %s` stops it): %w",
				runID, runID, runID, err)
		}
		return nil, err
	}
	oc, err := info.Outcome(r.OutDir)
	if err != nil {
		return oc, err
	}
	return oc, oc.Err()
}

func (r Remote) printf(format string, args ...any) {
	if r.Progress != nil {
		r.Progress.Printf(format, args...)
	}
}
