package fanout

import (
	"context"
	"encoding/json"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// Replay limits (map/replay).
const (
	replayDefaultLimit = 100
	replayMaxLimit     = 1000
	replayScanBatch    = 256
)

// ReplayResult is map/replay's result.
type ReplayResult struct {
	Events  []ReplayedEvent `json:"events"`
	HasMore bool            `json:"hasMore"`
}

// ReplayedEvent is one event of a map/replay page.
type ReplayedEvent struct {
	EventID   string          `json:"eventId"`
	Timestamp int64           `json:"timestamp"`
	CausedBy  []string        `json:"causedBy,omitempty"`
	Event     json.RawMessage `json:"event"`
}

// Replay handles map/replay {afterEventId? (exclusive), fromTimestamp?,
// toTimestamp? (both inclusive), filter?, limit? (default 100, at most
// 1000)}: a page of retained registry events in log order. Message events
// are ephemeral and never replayed. A start older than the retained window
// is 4000 with details.reason "replay_window_exceeded".
func (h *Hub) Replay(_ context.Context, sessionID string, params json.RawMessage) (any, error) {
	obj, err := rpc.ParseParams(params)
	if err != nil {
		return nil, err
	}
	after, err := obj.String("afterEventId")
	if err != nil {
		return nil, err
	}
	from, hasFrom, err := obj.Int("fromTimestamp")
	if err != nil {
		return nil, err
	}
	to, hasTo, err := obj.Int("toTimestamp")
	if err != nil {
		return nil, err
	}
	if hasFrom && hasTo && to < from {
		return nil, rpc.InvalidParams("toTimestamp", "must not be before fromTimestamp")
	}
	limit, hasLimit, err := obj.Int("limit")
	switch {
	case err != nil:
		return nil, err
	case !hasLimit:
		limit = replayDefaultLimit
	case limit < 1:
		return nil, rpc.InvalidParams("limit", "must be >= 1")
	}
	limit = min(limit, replayMaxLimit)
	f, err := parseFilter(obj["filter"])
	if err != nil {
		return nil, err
	}
	var pos uint64
	if after != "" {
		if pos, err = h.afterEvent("afterEventId", after); err != nil {
			return nil, err
		}
	} else if hasFrom {
		if err := h.checkWindow(from); err != nil {
			return nil, err
		}
	}
	sess, _ := h.reg.Session(sessionID) // unknown: an empty viewer, which Visible restricts
	return h.collect(sessionID, sess.ParticipantID, sess.ParticipantType, pos, f, from, hasFrom, to, hasTo, int(limit)), nil
}

// collect scans the log after pos for up to limit matching events, and one
// more to know whether there are more.
func (h *Hub) collect(sessionID, participantID, participantType string, pos uint64, f *filter, from int64, hasFrom bool, to int64, hasTo bool, limit int) *ReplayResult {
	res := &ReplayResult{Events: []ReplayedEvent{}}
	for {
		batch := h.reg.EventsAfter(pos, replayScanBatch)
		if len(batch) == 0 {
			return res
		}
		for _, ev := range batch {
			pos = ev.Position
			if (hasFrom && ev.Timestamp < from) || (hasTo && ev.Timestamp > to) {
				continue
			}
			p := prepare(ev, false)
			if !f.match(p, h.reg) || !h.visible(sessionID, participantID, participantType, &p.ev) {
				continue
			}
			if len(res.Events) == limit {
				res.HasMore = true
				return res
			}
			res.Events = append(res.Events, ReplayedEvent{EventID: ev.ID, Timestamp: ev.Timestamp, CausedBy: ev.CausedBy, Event: p.body})
		}
	}
}

// startPosition resolves where a new subscription starts: the log position
// after which it delivers, and the cursor event to record (the event at
// that position, "" when none is retained).
func (h *Hub) startPosition(st startSpec) (uint64, string, error) {
	_, last := h.reg.Window()
	switch st.kind {
	case startAfterID:
		pos, err := h.afterEvent(st.field, st.eventID)
		return pos, st.eventID, err
	case startTimestamp:
		if err := h.checkWindow(st.ts); err != nil {
			return 0, "", err
		}
		pos := h.firstAtOrAfter(st.ts) - 1
		return pos, h.idAt(pos), nil
	}
	return last, h.idAt(last), nil
}

// afterEvent finds a retained event; one that aged out is
// replay_window_exceeded, one that never existed -32602.
func (h *Hub) afterEvent(field, id string) (uint64, error) {
	if pos, ok := h.reg.PositionOf(id); ok {
		return pos, nil
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return 0, rpc.InvalidParams(field, "not an event id")
	}
	if oldest, ok := h.oldestEvent(); ok && int64(u.Time()) < oldest.Timestamp {
		return 0, windowExceeded(oldest)
	}
	return 0, rpc.InvalidParams(field, "unknown event id "+id)
}

// checkWindow fails when events at or after ts may already have been
// dropped from the retained window.
func (h *Hub) checkWindow(ts int64) error {
	if oldest, ok := h.oldestEvent(); ok && oldest.Position > 1 && ts < oldest.Timestamp {
		return windowExceeded(oldest)
	}
	return nil
}

func (h *Hub) oldestEvent() (registry.Event, bool) {
	oldest, _ := h.reg.Window()
	if oldest == 0 {
		return registry.Event{}, false
	}
	evs := h.reg.EventsAfter(oldest-1, 1)
	if len(evs) == 0 {
		return registry.Event{}, false
	}
	return evs[0], true
}

// firstAtOrAfter is the position of the first retained event with
// timestamp >= ts (last+1 when there is none).
func (h *Hub) firstAtOrAfter(ts int64) uint64 {
	oldest, last := h.reg.Window()
	pos := oldest
	if pos > 0 {
		pos--
	}
	for {
		batch := h.reg.EventsAfter(pos, replayScanBatch)
		if len(batch) == 0 {
			return last + 1
		}
		for _, ev := range batch {
			if ev.Timestamp >= ts {
				return ev.Position
			}
			pos = ev.Position
		}
	}
}

// idAt returns the id of the retained event at pos ("" if none).
func (h *Hub) idAt(pos uint64) string {
	if pos == 0 {
		return ""
	}
	if evs := h.reg.EventsAfter(pos-1, 1); len(evs) == 1 && evs[0].Position == pos {
		return evs[0].ID
	}
	return ""
}

// resumePosition is where a restored subscription continues: after its
// cursor event; at the oldest retained event (gap=true) when the cursor
// aged out; at the oldest retained event when it has no cursor (it was
// created on an empty log, so everything since is new to it).
func (h *Hub) resumePosition(cursorID string) (pos uint64, gap bool) {
	oldest, last := h.reg.Window()
	if cursorID != "" {
		if p, ok := h.reg.PositionOf(cursorID); ok {
			return p, false
		}
		if oldest == 0 {
			return last, true
		}
		return oldest - 1, true
	}
	if oldest == 0 {
		return last, false
	}
	return oldest - 1, false
}

func windowExceeded(oldest registry.Event) error {
	return rpc.NewError(rpc.CodeExhausted, "Replay start is older than the retained event window").
		WithDetails(map[string]any{"reason": "replay_window_exceeded", "oldestEventId": oldest.ID, "oldestTimestamp": oldest.Timestamp})
}
