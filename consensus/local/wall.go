package local

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/concordmap/concord/consensus"
)

// wall runs agents concurrently against a real clock.
type wall struct {
	agents  consensus.Directory
	clock   Clock
	tr      *consensus.Tracker
	results chan consensus.Input
	cancels map[string]context.CancelFunc
	wg      sync.WaitGroup
}

// run drives the run to its end. Every goroutine it starts is cancelled and
// waited for before it returns.
func (w *wall) run(ctx context.Context, start consensus.Input) (*consensus.Outcome, error) {
	w.results = make(chan consensus.Input, 16)
	w.cancels = map[string]context.CancelFunc{}
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		w.wg.Wait()
	}()
	dispatch := func(t *consensus.Task) {
		a, ok := w.agents.Agent(t.ParticipantID)
		if !ok {
			w.wg.Add(1)
			go func() { // deliver through the channel: Apply must not re-enter
				defer w.wg.Done()
				w.send(runCtx, consensus.NoAgentInput(0, t))
			}()
			return
		}
		tctx, cancel := context.WithCancel(runCtx)
		w.cancels[t.ID] = cancel
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			raw, err := a.Handle(tctx, t)
			if tctx.Err() != nil {
				return // cancelled: the engine no longer waits for it
			}
			w.send(runCtx, consensus.ReplyInput(0, t, raw, err))
		}()
	}
	if err := w.tr.Apply(start, dispatch, w.cancel); err != nil {
		return nil, err
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !w.tr.Done() {
		tid, due, tok := w.tr.NextTimer()
		wait := time.Hour
		if tok {
			wait = time.Duration(due-w.clock.NowMs()) * time.Millisecond
			if wait < 0 {
				wait = 0
			}
		}
		timer.Reset(wait)
		var in consensus.Input
		select {
		case <-ctx.Done():
			if err := w.tr.Apply(consensus.Cancel(w.clock.NowMs(), ctx.Err().Error()), dispatch, w.cancel); err != nil {
				return w.tr.Outcome(), err
			}
			return w.tr.Outcome(), ctx.Err()
		case in = <-w.results:
			in.At = w.clock.NowMs()
			delete(w.cancels, in.TaskID)
		case <-timer.C:
			if !tok {
				continue
			}
			now := w.clock.NowMs()
			if now < due {
				continue // woke early (clock skew): wait again
			}
			w.tr.RemoveTimer(tid)
			in = consensus.TimerFired(now, tid)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if err := w.tr.Apply(in, dispatch, w.cancel); err != nil {
			return w.tr.Outcome(), fmt.Errorf("consensus: apply input: %w", err)
		}
	}
	return w.tr.Outcome(), nil
}

// cancel stops the agent call of a task the engine gave up on.
func (w *wall) cancel(id string) {
	if c, ok := w.cancels[id]; ok {
		c()
		delete(w.cancels, id)
	}
}

func (w *wall) send(ctx context.Context, in consensus.Input) {
	select {
	case w.results <- in:
	case <-ctx.Done():
	}
}
