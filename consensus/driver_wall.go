package consensus

import (
	"context"
	"fmt"
	"time"
)

// runWall runs agents concurrently against a real clock. Every goroutine it
// starts is cancelled and waited for before it returns.
func (d *driver) runWall(ctx context.Context, start Input) (*LocalRun, error) {
	clock := d.opts.Clock
	d.results = make(chan Input, 16)
	d.cancels = map[string]context.CancelFunc{}
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		d.wg.Wait()
	}()
	dispatch := func(t *Task) {
		a, ok := d.agents.Agent(t.ParticipantID)
		if !ok {
			d.wg.Add(1)
			go func() { // deliver through the channel: Step must not re-enter
				defer d.wg.Done()
				d.send(runCtx, TaskFailed(0, t.ID, t.ParticipantID, FailDispatch, ErrNoAgent.Error()+" "+t.ParticipantID))
			}()
			return
		}
		tctx, cancel := context.WithCancel(runCtx)
		d.cancels[t.ID] = cancel
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			raw, err := a.Handle(tctx, t)
			if tctx.Err() != nil {
				return // cancelled: the engine no longer waits for it
			}
			d.send(runCtx, answerInput(0, t, raw, err))
		}()
	}
	if err := d.apply(start, dispatch); err != nil {
		return nil, err
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !d.done {
		tid, te, tok := d.nextTimer()
		wait := time.Hour
		if tok {
			wait = time.Duration(te.due-clock.NowMs()) * time.Millisecond
			if wait < 0 {
				wait = 0
			}
		}
		timer.Reset(wait)
		var in Input
		select {
		case <-ctx.Done():
			if err := d.apply(Cancel(clock.NowMs(), ctx.Err().Error()), dispatch); err != nil {
				return d.finish(), err
			}
			return d.finish(), ctx.Err()
		case in = <-d.results:
			in.At = clock.NowMs()
			delete(d.cancels, in.TaskID)
		case <-timer.C:
			if !tok {
				continue
			}
			now := clock.NowMs()
			if now < te.due {
				continue // woke early (clock skew): wait again
			}
			delete(d.timers, tid)
			in = TimerFired(now, tid)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if err := d.apply(in, dispatch); err != nil {
			return d.finish(), fmt.Errorf("consensus: apply input: %w", err)
		}
	}
	return d.finish(), nil
}

func (d *driver) send(ctx context.Context, in Input) {
	select {
	case d.results <- in:
	case <-ctx.Done():
	}
}
