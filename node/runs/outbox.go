package runs

import (
	"sync"

	"github.com/concordmap/concord/consensus"
)

// work is the driver's share of one applied input: the effects of one
// Step on one run (events excluded), in order.
type work struct {
	runID string
	fx    []consensus.Effect
}

// outbox carries applied effects from Apply to the leader's driver without
// ever blocking Apply: items queue up to a limit, beyond which they are
// dropped and the driver is told to rescan every run (which yields the
// same outstanding tasks and timers, just more slowly).
type outbox struct {
	mu       sync.Mutex
	items    []work
	overflow bool
	ready    chan struct{} // capacity 1: a pending wake-up
}

func newOutbox() *outbox { return &outbox{ready: make(chan struct{}, 1)} }

// push queues w (called by Apply under Module.mu).
func (o *outbox) push(w work, limit int) {
	o.mu.Lock()
	if o.overflow {
		// Already rescanning; the rescan will see this input's result.
	} else if len(o.items) >= limit {
		o.items, o.overflow = nil, true
	} else {
		o.items = append(o.items, w)
	}
	o.mu.Unlock()
	o.wake()
}

func (o *outbox) wake() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// drain takes every queued item; overflow true means items were dropped and
// the driver must rescan.
func (o *outbox) drain() (items []work, overflow bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	items, overflow = o.items, o.overflow
	o.items, o.overflow = nil, false
	return items, overflow
}

// runWork is what the driver needs of one running run after a scan.
type runWork struct {
	runID  string
	tasks  []*consensus.Task
	timers map[string]timerEntry
}

// attachDriver subscribes a driver and scans every running run in the same
// critical section, so the outbox holds exactly the effects applied after
// the scan. It takes the write lock: building outstanding tasks may fill
// the engine's caches.
func (m *Module) attachDriver() (*outbox, []runWork) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := newOutbox()
	m.out = o
	return o, m.scanLocked()
}

// rescan rebuilds the driver's view after an overflow (or a Restore),
// again atomically with clearing the outbox.
func (m *Module) rescan(o *outbox) []runWork {
	m.mu.Lock()
	defer m.mu.Unlock()
	o.drain()
	return m.scanLocked()
}

// detachDriver unsubscribes o (a no-op if another driver replaced it).
func (m *Module) detachDriver(o *outbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == o {
		m.out = nil
	}
}

func (m *Module) scanLocked() []runWork {
	var out []runWork
	for _, id := range m.ids {
		r := m.runs[id]
		if r.st.Done() {
			continue
		}
		w := runWork{runID: id, tasks: r.st.OutstandingTasks(), timers: make(map[string]timerEntry, len(r.timers))}
		for tid, t := range r.timers {
			w.timers[tid] = t
		}
		out = append(out, w)
	}
	return out
}
