package registry

import "encoding/json"

// Payloads rendered when read. Every replica applies every update, but
// most replicas read most events only when they snapshot (every 65,536
// commands under load: one window, 10,000 events) or never (a node with
// no subscriber); rendering agent_state_changed's Data, the one event of
// the common update, was a tenth of an update's apply on every replica.
// So the event keeps the facts its payload is made of (strings it shares
// with the agent and the command, no allocation) and the window renders
// Data when an event leaves it: EventsAfter's copies and a snapshot's
// records. The bytes are stateChangeData's, the ones written eagerly
// before (TestLazyStateChange_SameAsEager), so what readers, snapshots
// and other replicas see does not change.

// stateChange is an agent_state_changed payload not yet rendered; set
// tells it apart from the zero value (any field may be empty).
type stateChange struct {
	prev, cur, reason string
	set               bool
}

// emitStateChange records an agent_state_changed event about agentID
// with its Data left to render (emitData's rules otherwise).
func (t *txn) emitStateChange(agentID, prev, cur, reason string, scopeIDs []string) string {
	id := t.emitData(EventAgentStateChanged, nil, []string{agentID}, scopeIDs)
	t.pending[len(t.pending)-1].change = stateChange{prev: prev, cur: cur, reason: reason, set: true}
	return id
}

// lazyData reports whether ev's Data is still to be rendered.
func (ev *Event) lazyData() bool { return ev.change.set }

// appendData appends ev's Data to b: rendered when lazy, else as stored.
// The agent is the event's only subject (emitStateChange).
func (ev *Event) appendData(b []byte) []byte {
	if !ev.change.set {
		return append(b, ev.Data...)
	}
	c := &ev.change
	return appendStateChange(b, ev.AgentIDs[0], c.prev, c.cur, c.reason)
}

// render gives a copy leaving the window its Data.
func (ev *Event) render() {
	if !ev.change.set {
		return
	}
	c := &ev.change
	ev.Data = json.RawMessage(stateChangeData(ev.AgentIDs[0], c.prev, c.cur, c.reason))
	ev.change = stateChange{}
}
