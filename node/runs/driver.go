package runs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/router"
)

// driver performs the effects of applied inputs while this node leads:
// it sends tasks to agents (retrying undeliverable ones with backoff),
// keeps the engine's timers and proposes timer_fired when they are due.
// One driver runs per leadership term; its loop goroutine owns every
// field below except results, and every goroutine it starts (one per
// send or proposal in flight) is waited for before run returns.
type driver struct {
	mod  *Module
	send Messenger
	prop Proposer
	cfg  driverConfig
	log  *slog.Logger

	tasks   map[string]*pendingTask // by task id
	timers  map[string]*armedTimer  // by timer id
	sched   schedule
	enc     taskEncoder
	results chan outcome
	wg      sync.WaitGroup
}

type driverConfig struct {
	nodeID         string
	now            func() time.Time
	retryMin       time.Duration
	retryMax       time.Duration
	sendTimeout    time.Duration
	proposeTimeout time.Duration
	maxSleep       time.Duration
	resendInterval time.Duration // 0: never re-send a delivered task
}

// pendingTask is a task the engine waits for, as this driver knows it.
type pendingTask struct {
	runID   string
	task    *consensus.Task
	body    taskJSON // the task's JSON (encoded by the loop, shared catalog)
	attempt int
	sending bool   // a send is in flight
	sent    bool   // the router accepted it for the agent
	done    bool   // the engine stopped waiting: forget once the send returns
	gen     uint64 // invalidates scheduled retries
}

// armedTimer is an engine timer this driver will fire.
type armedTimer struct {
	runID    string
	at       int64
	attempt  int
	inflight bool
	gen      uint64 // invalidates scheduled firings and stale outcomes
}

type outcomeKind uint8

const (
	sendDone outcomeKind = iota + 1
	proposeDone
	failDone
)

// outcome is the result of a send or proposal goroutine.
type outcome struct {
	kind outcomeKind
	key  string // task id or timer id
	gen  uint64
	body taskJSON
	err  error
}

// serviceSender is who task messages come from.
var serviceSender = router.Sender{ParticipantID: ServiceID, ParticipantType: "system"}

func newDriver(mod *Module, send Messenger, prop Proposer, cfg driverConfig, log *slog.Logger) *driver {
	return &driver{
		mod: mod, send: send, prop: prop, cfg: cfg, log: log,
		tasks: map[string]*pendingTask{}, timers: map[string]*armedTimer{},
		results: make(chan outcome),
	}
}

// run drives until ctx ends. It subscribes to the module first and scans
// every running run atomically with that, so it re-sends every
// outstanding task and re-arms every pending timer (those already due
// fire at once), then follows the effects of each applied input.
func (d *driver) run(ctx context.Context) {
	ob, initial := d.mod.attachDriver()
	defer d.mod.detachDriver(ob)
	ctx, cancel := context.WithCancel(ctx)
	defer d.wg.Wait() // after cancel (defers run last-in first-out)
	defer cancel()
	d.log.Info("run driver started", "runs", len(initial))
	defer d.log.Info("run driver stopped")
	d.reconcile(ctx, initial)
	t := time.NewTimer(d.cfg.maxSleep)
	defer t.Stop()
	for {
		t.Reset(d.sleep())
		select {
		case <-ctx.Done():
			return
		case <-ob.ready:
			items, overflow := ob.drain()
			if overflow {
				d.log.Warn("run driver outbox overflowed; rescanning runs")
				d.reconcile(ctx, d.mod.rescan(ob))
				continue
			}
			for _, w := range items {
				d.absorb(ctx, w)
			}
		case <-t.C:
			d.fireDue(ctx)
		case o := <-d.results:
			d.handle(ctx, o)
		}
	}
}

func (d *driver) nowMs() int64 { return d.cfg.now().UnixMilli() }

// sleep is how long the loop may wait for the next scheduled entry. It is
// capped so that a clock that jumps is noticed within maxSleep.
func (d *driver) sleep() time.Duration {
	at, ok := d.sched.next()
	if !ok {
		return d.cfg.maxSleep
	}
	return min(max(time.Duration(at-d.nowMs())*time.Millisecond, 0), d.cfg.maxSleep)
}

// reconcile makes the driver's view equal a full scan: tasks and timers
// the scan does not have are forgotten, new ones are sent and armed, and
// tasks already sent this term are not sent again.
func (d *driver) reconcile(ctx context.Context, scan []runWork) {
	liveTasks := map[string]bool{}
	liveTimers := map[string]bool{}
	for _, w := range scan {
		for _, t := range w.tasks {
			liveTasks[t.ID] = true
			if p := d.tasks[t.ID]; p != nil {
				if p.done {
					p.done = false
					if !p.sent && !p.sending {
						d.startSend(ctx, t.ID, p)
					}
				}
				continue
			}
			d.addTask(ctx, w.runID, t)
		}
		for id, tm := range w.timers {
			liveTimers[id] = true
			if cur := d.timers[id]; cur == nil || cur.at != tm.at {
				d.setTimer(w.runID, id, tm.at)
			}
		}
	}
	for id := range d.tasks {
		if !liveTasks[id] {
			d.forgetTask(id)
		}
	}
	for id := range d.timers {
		if !liveTimers[id] {
			delete(d.timers, id)
		}
	}
}

// absorb performs the effects of one applied input.
func (d *driver) absorb(ctx context.Context, w work) {
	for _, e := range w.fx {
		switch e := e.(type) {
		case consensus.DispatchTask:
			if d.tasks[e.Task.ID] == nil {
				d.addTask(ctx, w.runID, e.Task)
			}
		case consensus.SetTimer:
			d.setTimer(w.runID, e.ID, e.At)
		case consensus.ClearTimer:
			delete(d.timers, e.ID)
			d.forgetTask(e.ID) // a task's own timer is cleared when it settles
		case consensus.CancelTask:
			if p := d.tasks[e.TaskID]; p != nil && (p.sent || p.sending) {
				d.noticeCancelled(ctx, e.TaskID, p)
			}
			d.forgetTask(e.TaskID)
		case consensus.Finish:
			d.forgetRun(w.runID)
		}
	}
}

func (d *driver) addTask(ctx context.Context, runID string, t *consensus.Task) {
	p := &pendingTask{runID: runID, task: t}
	d.tasks[t.ID] = p
	body, err := d.enc.encode(t)
	if err != nil {
		// Engine tasks always encode; fall back to encoding in the send.
		d.log.Warn("task does not encode", "task_id", t.ID, "err", err)
	}
	p.body = body
	d.startSend(ctx, t.ID, p)
}

func (d *driver) forgetTask(id string) {
	p := d.tasks[id]
	if p == nil {
		return
	}
	p.done = true
	p.gen++
	if !p.sending {
		delete(d.tasks, id)
	}
}

func (d *driver) forgetRun(runID string) {
	for id, p := range d.tasks {
		if p.runID == runID {
			d.forgetTask(id)
		}
	}
	for id, tm := range d.timers {
		if tm.runID == runID {
			delete(d.timers, id)
		}
	}
}

func (d *driver) setTimer(runID, id string, at int64) {
	tm := d.timers[id]
	if tm == nil {
		tm = &armedTimer{runID: runID}
		d.timers[id] = tm
	}
	tm.at, tm.attempt, tm.inflight = at, 0, false
	tm.gen++
	d.sched.push(entry{at: at, key: id, kind: entryTimer, gen: tm.gen})
}

// fireDue runs every scheduled entry whose time has come.
func (d *driver) fireDue(ctx context.Context) {
	now := d.nowMs()
	for {
		e, ok := d.sched.popDue(now)
		if !ok {
			return
		}
		switch e.kind {
		case entryTimer:
			if tm := d.timers[e.key]; tm != nil && tm.gen == e.gen && !tm.inflight {
				d.fireTimer(ctx, e.key, tm)
			}
		case entrySend:
			if p := d.tasks[e.key]; p != nil && p.gen == e.gen && !p.done && !p.sending {
				d.startSend(ctx, e.key, p)
			}
		}
	}
}
