package agentbridge

import (
	"context"
	"encoding/json"
	"time"
)

// WithThinkTime delays every answer of h by d, as a model would take time to
// think. Demo and test agents use it so a debate lasts long enough to watch
// (and to fail a node in the middle of it). The wait ends early, with the
// context's error, when the task is cancelled or times out.
func WithThinkTime(h Handler, d time.Duration) Handler {
	if d <= 0 {
		return h
	}
	return HandlerFunc(func(ctx context.Context, t *Task) (json.RawMessage, error) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
			return h.Handle(ctx, t)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}
