package runs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// backoff is the delay before attempt n+1 (n >= 1): exponential from
// retryMin, capped at retryMax, with ±20% jitter so retries of many tasks
// spread out.
func (d *driver) backoff(n int) time.Duration {
	b := d.cfg.retryMin
	for i := 1; i < n && b < d.cfg.retryMax; i++ {
		b *= 2
	}
	b = min(b, d.cfg.retryMax)
	return b + time.Duration((rand.Float64()*0.4-0.2)*float64(b))
}

func (d *driver) scheduleIn(delay time.Duration, key string, kind entryKind, gen uint64) {
	d.sched.push(entry{at: d.nowMs() + delay.Milliseconds(), key: key, kind: kind, gen: gen})
}

// handle processes the outcome of a send or a proposal.
func (d *driver) handle(ctx context.Context, o outcome) {
	switch o.kind {
	case sendDone:
		d.sendDone(ctx, o)
	case proposeDone:
		d.proposeDone(o)
	case failDone:
		d.failDone(o)
	}
}

func (d *driver) sendDone(ctx context.Context, o outcome) {
	p := d.tasks[o.key]
	if p == nil {
		return
	}
	p.sending = false
	if o.body.len() > 0 {
		p.body = o.body
	}
	if p.done {
		delete(d.tasks, o.key)
		return
	}
	if o.err == nil {
		p.sent = true
		d.log.Debug("task sent", "run_id", p.runID, "task_id", o.key, "participant_id", p.task.ParticipantID)
		// Accepted is not received: a connection that dies with the message
		// in its queue loses it. Send again while the engine still waits.
		if d.cfg.resendInterval > 0 {
			p.attempt = 0
			p.gen++
			d.scheduleIn(d.cfg.resendInterval, o.key, entrySend, p.gen)
		}
		return
	}
	if undeliverable(o.err) {
		d.failTask(ctx, o.key, p, o.err)
		return
	}
	lvl := slog.LevelDebug
	if p.attempt == 1 || p.attempt%10 == 0 {
		lvl = slog.LevelInfo
	}
	d.log.Log(context.Background(), lvl, "task not delivered; will retry", "run_id", p.runID, "task_id", o.key,
		"participant_id", p.task.ParticipantID, "attempt", p.attempt, "err", o.err)
	p.gen++
	d.scheduleIn(d.backoff(p.attempt), o.key, entrySend, p.gen)
}

func (d *driver) proposeDone(o outcome) {
	tm := d.timers[o.key]
	if tm == nil || tm.gen != o.gen {
		return // cleared or re-armed meanwhile
	}
	tm.inflight = false
	var de *Error
	switch {
	case o.err == nil:
		// Applied: the engine consumed the timer (the module forgets it too).
		delete(d.timers, o.key)
	case errors.As(o.err, &de):
		d.log.Debug("timer refused", "timer_id", o.key, "err", o.err)
		delete(d.timers, o.key)
	default:
		tm.attempt++
		d.log.Info("timer proposal failed; will retry", "timer_id", o.key, "attempt", tm.attempt, "err", o.err)
		d.scheduleIn(d.backoff(tm.attempt), o.key, entryTimer, tm.gen)
	}
}

// startSend sends a task message in its own goroutine.
func (d *driver) startSend(ctx context.Context, id string, p *pendingTask) {
	p.sending = true
	p.attempt++
	runID, task, body := p.runID, p.task, p.body
	d.wg.Go(func() {
		var err error
		if body.len() == 0 {
			body.head, err = task.MarshalJSON()
		}
		if err == nil {
			buf := messageBuffers.Get().(*[]byte)
			msg := taskMessage((*buf)[:0], runID, task, body, d.nowMs())
			sctx, cancel := context.WithTimeout(ctx, d.cfg.sendTimeout)
			_, err = d.send.Send(sctx, serviceSender, msg)
			cancel()
			// Send does not keep params (Messenger contract), so the buffer
			// is reused: fresh 100 KB buffers per task cost more in page
			// faults and GC than the copy itself.
			*buf = msg
			messageBuffers.Put(buf)
		}
		select {
		case d.results <- outcome{kind: sendDone, key: id, body: body, err: err}:
		case <-ctx.Done():
		}
	})
}

// noticeCancelled tells the agent, best effort and without waiting, that
// the engine stopped waiting for a task it was sent: an LLM behind the
// agent can stop spending on an answer that would be refused (90002).
func (d *driver) noticeCancelled(ctx context.Context, id string, p *pendingTask) {
	pid, runID := p.task.ParticipantID, p.runID
	d.wg.Go(func() {
		b := make([]byte, 0, 180+len(id)+len(runID)+len(pid))
		b = append(b, `{"to":`...)
		b = appendAddress(b, pid)
		b = append(b, `,"payload":{"type":"`+TaskCancelledType+`","runId":`...)
		b = jsonkit.AppendString(b, runID)
		b = append(b, `,"taskId":`...)
		b = jsonkit.AppendString(b, id)
		b = append(b, `},"meta":{"correlationId":`...)
		b = jsonkit.AppendString(b, id)
		b = append(b, `}}`...)
		sctx, cancel := context.WithTimeout(ctx, d.cfg.sendTimeout)
		defer cancel()
		if _, err := d.send.Send(sctx, serviceSender, b); err != nil {
			d.log.Debug("task cancellation notice not delivered", "task_id", id, "err", err)
		}
	})
}

// undeliverable reports a send refused for the message itself (-32602:
// the router or a federation link will never carry it, such as a task
// larger than a link's envelope limit): unlike an agent that is not
// connected, retrying cannot help.
func undeliverable(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodeInvalidParams
}

// failTask commits the failure of a task that can never be delivered, so
// the participant is eliminated with the reason in the run (reason error,
// the text in ParticipantEliminated.error) instead of timing out silently.
// The proposal counts as the task's send in flight; a transient proposal
// error retries the send, which fails and proposes again.
func (d *driver) failTask(ctx context.Context, id string, p *pendingTask, cause error) {
	pid := p.task.ParticipantID
	why := cause.Error()
	if re := (*rpc.Error)(nil); errors.As(cause, &re) {
		why = re.Message
	}
	reason := truncate("task not deliverable to "+pid+": "+why, maxReasonLen)
	in := &concordv1.RunInput{RunId: p.runID, TimeMs: d.nowMs(), NodeId: d.cfg.nodeID, Source: ServiceID,
		Input: failedInput(id, pid, reason)}
	if err := d.mod.Check(in); err != nil {
		d.log.Debug("undeliverable task not failed", "task_id", id, "err", err)
		d.forgetTask(id)
		return
	}
	d.log.Warn("task not deliverable; failing it", "run_id", p.runID, "task_id", id, "participant_id", pid, "err", cause)
	p.sending = true
	d.wg.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, d.cfg.proposeTimeout)
		_, _, err := d.prop.Apply(pctx, concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, in)
		cancel()
		select {
		case d.results <- outcome{kind: failDone, key: id, err: err}:
		case <-ctx.Done():
		}
	})
}

func (d *driver) failDone(o outcome) {
	p := d.tasks[o.key]
	if p == nil {
		return
	}
	p.sending = false
	var de *Error
	switch {
	case p.done:
		delete(d.tasks, o.key)
	case o.err == nil, errors.As(o.err, &de):
		// Applied, or refused because the task settled otherwise: the
		// applied effects forget the task.
	default:
		d.log.Info("failing an undeliverable task did not commit; will retry", "task_id", o.key, "err", o.err)
		p.gen++
		d.scheduleIn(d.backoff(p.attempt), o.key, entrySend, p.gen)
	}
}

// fireTimer proposes timer_fired for a due timer, unless the local replica
// (current on the leader) says the engine would ignore it.
func (d *driver) fireTimer(ctx context.Context, id string, tm *armedTimer) {
	in := &concordv1.RunInput{RunId: tm.runID, TimeMs: max(d.nowMs(), tm.at), NodeId: d.cfg.nodeID,
		Input: &concordv1.RunInput_TimerFired{TimerFired: &concordv1.RunTimerFired{TimerId: id, AtMs: tm.at}}}
	if err := d.mod.Check(in); err != nil {
		d.log.Debug("timer not fired", "timer_id", id, "err", err)
		delete(d.timers, id)
		return
	}
	tm.inflight = true
	gen := tm.gen
	d.wg.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, d.cfg.proposeTimeout)
		_, _, err := d.prop.Apply(pctx, concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, in)
		cancel()
		select {
		case d.results <- outcome{kind: proposeDone, key: id, gen: gen, err: err}:
		case <-ctx.Done():
		}
	})
}

// messageBuffers recycles task message buffers between sends.
var messageBuffers = sync.Pool{New: func() any { return new([]byte) }}

// taskMessage builds the map/send params of a task message (PROTOCOL.md)
// into b.
func taskMessage(b []byte, runID string, t *consensus.Task, body taskJSON, nowMs int64) json.RawMessage {
	b = slices.Grow(b[:0], 212+body.len()+2*len(t.ID)+len(runID)+len(t.ParticipantID))
	b = append(b, `{"to":`...)
	b = appendAddress(b, t.ParticipantID)
	b = append(b, `,"payload":{"type":"`+TaskMessageType+`","runId":`...)
	b = jsonkit.AppendString(b, runID)
	if t.TimeoutAt > 0 {
		b = append(b, `,"timeoutAt":`...)
		b = strconv.AppendInt(b, t.TimeoutAt, 10)
	}
	b = append(b, `,"task":`...)
	b = body.appendTo(b)
	b = append(b, `},"meta":{"expectsResponse":true,"correlationId":`...)
	b = jsonkit.AppendString(b, t.ID)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, nowMs, 10)
	return append(b, `}}`...)
}
