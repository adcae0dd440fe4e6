package agentbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/client/mapclient"
)

// Client is what the bridge needs from a MAP connection (*mapclient.Client
// satisfies it).
type Client interface {
	RegisterAgent(ctx context.Context, spec mapclient.AgentSpec) (json.RawMessage, error)
	UnregisterAgent(ctx context.Context, agentID, reason string) error
	Send(ctx context.Context, p mapclient.SendParams) (mapclient.SendResult, error)
}

// maxAux bounds the short-lived goroutines that answer rejected or
// duplicate tasks; past it such messages are dropped (the engine's task
// timer still settles them).
const maxAux = 64

// Bridge is the `concord agent` engine: it receives task messages
// (Deliver), runs the Handler with bounded concurrency and a deadline per
// task, and replies to the runs service. Build it with New; Run drives it.
type Bridge struct {
	cfg Config
	log *slog.Logger
	sem chan struct{}

	mu       sync.Mutex
	client   Client
	work     context.Context // lifecycle of task goroutines (cancelled when Run stops)
	replies  context.Context // lifecycle of reply sends (cancelled after ReplyTimeout on stop)
	stopping bool
	active   int // task goroutines (running or waiting for a slot)
	aux      int
	tasks    map[string]*taskState
	doneIDs  []string // answered task ids, oldest first (DoneCacheSize)
	wg       sync.WaitGroup

	// Stats, for tests and logs.
	handled, failed, rejected, duplicates, cancelled int
}

type taskState struct {
	running   bool
	reply     any                // the payload sent, once answered
	cancel    context.CancelFunc // ends the running handler's context
	cancelled bool               // the run stopped waiting: no answer is sent
}

// New validates cfg and returns a Bridge.
func New(cfg Config) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Bridge{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "agentbridge", "agent_id", cfg.AgentID),
		sem:   make(chan struct{}, cfg.Concurrency),
		tasks: map[string]*taskState{},
	}, nil
}

// Stats reports how many tasks were answered, answered with an error,
// rejected for overload, ignored as duplicates, and cancelled by their run
// while being worked on.
type Stats struct{ Handled, Failed, Rejected, Duplicates, Cancelled int }

// Stats returns the counters.
func (b *Bridge) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Handled: b.handled, Failed: b.failed, Rejected: b.rejected, Duplicates: b.duplicates, Cancelled: b.cancelled}
}

// Run registers the agent through c and serves tasks until ctx ends. Then
// it stops taking tasks, cancels the running ones (their commands are
// killed and error payloads are sent), waits for the replies (at most
// ReplyTimeout), unregisters the agent and returns.
func (b *Bridge) Run(ctx context.Context, c Client) error {
	work, stopWork := context.WithCancel(context.Background())
	replies, stopReplies := context.WithCancel(context.Background())
	defer stopReplies()
	defer stopWork()
	b.mu.Lock()
	b.client, b.work, b.replies = c, work, replies
	b.mu.Unlock()
	spec := mapclient.AgentSpec{AgentID: b.cfg.AgentID, Name: b.cfg.Name, Role: b.cfg.Role,
		Metadata: json.RawMessage(`{"concordAgent":true}`)}
	if _, err := c.RegisterAgent(ctx, spec); err != nil {
		b.mu.Lock()
		b.stopping = true
		b.mu.Unlock()
		return fmt.Errorf("register agent %s: %w", b.cfg.AgentID, err)
	}
	b.log.Info("agent registered, waiting for tasks")
	<-ctx.Done()

	b.mu.Lock()
	b.stopping = true
	b.mu.Unlock()
	stopWork()
	waited := make(chan struct{})
	go func() { b.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(b.cfg.ReplyTimeout):
		stopReplies()
		<-waited
	}
	uctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReplyTimeout)
	defer cancel()
	if err := c.UnregisterAgent(uctx, b.cfg.AgentID, "agent stopped"); err != nil {
		return fmt.Errorf("unregister agent %s: %w", b.cfg.AgentID, err)
	}
	b.log.Info("agent unregistered")
	return nil
}

// Deliver takes one map/message (mapclient's OnMessage). It never blocks:
// the task runs on a goroutine of its own, owned by the bridge.
func (b *Bridge) Deliver(msg mapclient.Message) {
	if id, ok := parseCancel(msg); ok {
		b.cancelTask(id)
		return
	}
	t, err := parseTask(msg)
	if t == nil {
		b.log.Debug("message ignored: not a run task", "from", msg.From)
		return
	}
	t.homeSystem = b.homeSystem(msg.From)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client == nil || b.stopping {
		b.log.Warn("task dropped: agent not serving", "task_id", t.ID)
		return
	}
	if err != nil {
		b.log.Warn("malformed task", "task_id", t.ID, "err", err)
		b.goAux(t, b.errorPayload(err))
		return
	}
	if st, ok := b.tasks[t.ID]; ok {
		b.duplicates++
		if st.cancelled {
			b.log.Debug("task ignored: cancelled by its run", "task_id", t.ID)
			return
		}
		if st.reply == nil {
			b.log.Debug("duplicate task ignored: still running", "task_id", t.ID)
			return
		}
		b.log.Debug("duplicate task: sending the answer again", "task_id", t.ID)
		b.goAux(t, st.reply)
		return
	}
	if b.active >= b.cfg.Concurrency+b.cfg.QueueLimit {
		b.rejected++
		b.goAux(t, b.errorPayload(fmt.Errorf("agent %s overloaded: %d tasks in progress", b.cfg.AgentID, b.active)))
		return
	}
	st := &taskState{running: true}
	b.tasks[t.ID] = st
	b.active++
	b.wg.Add(1)
	go b.handle(b.work, t, st)
}

// cancelTask stops the work on a task its run no longer waits for: the
// handler's context ends (an --exec command is killed) and no answer is
// sent, since the engine would refuse it.
func (b *Bridge) cancelTask(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.tasks[id]
	if !ok || !st.running {
		return // unknown (never received or long forgotten) or answered already
	}
	st.cancelled = true
	if st.cancel != nil {
		st.cancel()
	}
	b.log.Info("task cancelled by its run", "task_id", id)
}

// goAux sends payload for t from a short-lived goroutine. Caller holds b.mu.
func (b *Bridge) goAux(t *Task, payload any) {
	if b.aux >= maxAux {
		b.log.Warn("reply dropped: too many pending replies", "task_id", t.ID)
		return
	}
	b.aux++
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.reply(t, payload, time.Now())
		b.mu.Lock()
		b.aux--
		b.mu.Unlock()
	}()
}

// handle runs one task: wait for a slot, run the handler under the task's
// deadline, reply, remember the answer.
func (b *Bridge) handle(work context.Context, t *Task, st *taskState) {
	defer b.wg.Done()
	deadline := time.Now().Add(b.cfg.TaskTimeout)
	if !t.Deadline.IsZero() && t.Deadline.Before(deadline) {
		deadline = t.Deadline
	}
	ctx, cancel := context.WithDeadline(work, deadline)
	b.mu.Lock()
	st.cancel = cancel
	b.mu.Unlock()
	payload, err := b.runHandler(ctx, t)
	cancel()
	b.mu.Lock()
	cancelled := st.cancelled
	b.mu.Unlock()
	if cancelled {
		b.finish(t.ID, &taskState{cancelled: true}, &b.cancelled)
		return
	}
	counter := &b.handled
	if err != nil {
		if work.Err() != nil {
			err = fmt.Errorf("agent %s stopping: %w", b.cfg.AgentID, err)
		}
		b.log.Warn("task failed", "task_id", t.ID, "err", err)
		payload, counter = b.errorPayload(err), &b.failed
	}
	// The answer is known from here on: a duplicate that arrives while it
	// is being sent gets it too.
	b.mu.Lock()
	st.reply = payload
	b.mu.Unlock()
	b.reply(t, payload, deadline)
	b.finish(t.ID, &taskState{reply: payload}, counter)
}

// finish records a task's end: counter (one of the Stats fields) goes up,
// and its final state is kept for duplicates among the last DoneCacheSize.
func (b *Bridge) finish(id string, st *taskState, counter *int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active--
	*counter++
	b.tasks[id] = st
	b.doneIDs = append(b.doneIDs, id)
	for len(b.doneIDs) > b.cfg.DoneCacheSize {
		delete(b.tasks, b.doneIDs[0])
		b.doneIDs = b.doneIDs[1:]
	}
}

// runHandler waits for a slot and calls the handler, turning a panic into
// an error so that a broken handler never takes the agent down.
func (b *Bridge) runHandler(ctx context.Context, t *Task) (out any, err error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: no free slot before the deadline (%d tasks at once)", ErrTimeout, b.cfg.Concurrency)
	}
	defer func() { <-b.sem }()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	env, err := b.cfg.Handler.Handle(ctx, t)
	if err != nil {
		return nil, err
	}
	if !json.Valid(env) {
		return nil, fmt.Errorf("%w: handler returned invalid JSON", ErrBadAnswer)
	}
	return env, nil
}

// reply sends payload to the runs service. A call cut by a connection loss
// is repeated on the next connection, a retryable refusal after a pause,
// until ReplyTimeout past the task's deadline (the engine has given up on
// the task by then).
func (b *Bridge) reply(t *Task, payload any, deadline time.Time) {
	b.mu.Lock()
	c, base := b.client, b.replies
	b.mu.Unlock()
	ctx, cancel := context.WithDeadline(base, laterOf(deadline, time.Now()).Add(b.cfg.ReplyTimeout))
	defer cancel()
	var to any = mapclient.AgentAddress{Agent: b.cfg.ServiceID}
	if t.homeSystem != "" {
		to = mapclient.FederatedAddress{System: t.homeSystem, Agent: b.cfg.ServiceID}
	}
	params := mapclient.SendParams{
		To:      to,
		Payload: payload,
		Meta:    map[string]any{"isResult": true, "correlationId": t.ID},
	}
	pause := 100 * time.Millisecond
	for {
		_, err := c.Send(ctx, params)
		switch {
		case err == nil:
			b.log.Debug("reply sent", "task_id", t.ID)
			return
		case errors.Is(err, mapclient.ErrConnectionLost):
			continue
		case retryable(err) && ctx.Err() == nil:
			b.log.Debug("reply refused, retrying", "task_id", t.ID, "err", err)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
			pause = min(2*pause, 2*time.Second)
			continue
		}
		b.log.Warn("reply not accepted", "task_id", t.ID, "err", err)
		return
	}
}

// homeSystem is the system of the runs service a task message came from
// when it crossed a federation link (from "<system>:agent:<ServiceID>"),
// else "": the answer goes to the service of the system that sent the
// task, where its run lives. Any other from (a task forged by some agent)
// is answered to the local service, which refuses what it does not know.
func (b *Bridge) homeSystem(from string) string {
	if sys, id, ok := federation.ParseRemoteID(from); ok && id == b.cfg.ServiceID {
		return sys
	}
	return ""
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
