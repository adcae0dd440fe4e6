package runs

import (
	"slices"

	"github.com/concordmap/concord/consensus"
)

// Files is what argue's result files (result.json, events.jsonl,
// summary.md) are written from: a copy of one run's replicated state, safe
// to use after the module's lock is released (the result and the event
// payloads are never modified once recorded).
type Files struct {
	RequestID string
	// Status is the run's status (running, finished, failed, cancelled).
	Status string
	// Result is the engine's result; nil until the run finished.
	Result *consensus.Result
	// Failure is why a failed or cancelled run ended; nil otherwise.
	Failure *consensus.Failure
	// Events are the engine events so far, in order, payloads as JSON.
	Events []consensus.Event
}

// Files returns a run's result-file material from the local replica, and
// false when the run is unknown (never started, or forgotten after its
// retention).
func (m *Module) Files(runID string) (Files, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.runs[runID]
	if r == nil {
		return Files{}, false
	}
	f := Files{RequestID: r.requestID, Status: r.status(), Result: r.result, Failure: r.failure,
		Events: make([]consensus.Event, len(r.events))}
	for i := range r.events {
		ev := &r.events[i]
		f.Events[i] = consensus.Event{Seq: ev.seq, AtMs: ev.atMs, SessionID: r.id, RequestID: r.requestID,
			Type: ev.typ, At: ev.at}
		if len(ev.payload) > 0 && string(ev.payload) != "null" {
			f.Events[i].Payload = slices.Clip(ev.payload)
		}
	}
	return f, true
}
