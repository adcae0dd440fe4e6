package registry

import (
	"slices"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applySubscriptionAdd handles COMMAND_TYPE_SUBSCRIPTION_ADD.
func (s *State) applySubscriptionAdd(tx *txn, m *concordv1.SubscriptionAddRequest) (any, error) {
	r := m.GetSubscription()
	e := tx.d.sessions[r.GetSessionId()]
	sub := subscriptionFromRecord(r)
	if sub.CreatedAt == 0 {
		sub.CreatedAt = tx.ts
	}
	ne := *e
	ne.s = copySession(&e.s)
	// Keep the list ordered by id (contract).
	i := 0
	for i < len(ne.s.Subscriptions) && ne.s.Subscriptions[i].ID < sub.ID {
		i++
	}
	subs := make([]Subscription, 0, len(ne.s.Subscriptions)+1)
	subs = append(subs, ne.s.Subscriptions[:i]...)
	subs = append(subs, sub)
	ne.s.Subscriptions = append(subs, ne.s.Subscriptions[i:]...)
	tx.d.putSession(&ne)
	return sub, nil
}

func subIndex(s *Session, id string) int {
	for i := range s.Subscriptions {
		if s.Subscriptions[i].ID == id {
			return i
		}
	}
	return -1
}

// applySubscriptionRemove handles COMMAND_TYPE_SUBSCRIPTION_REMOVE.
func (s *State) applySubscriptionRemove(tx *txn, m *concordv1.SubscriptionRemoveRequest) (any, error) {
	e := tx.d.sessions[m.GetSessionId()]
	i := subIndex(&e.s, m.GetSubscriptionId())
	removed := e.s.Subscriptions[i]
	ne := *e
	ne.s = copySession(&e.s)
	ne.s.Subscriptions = append(ne.s.Subscriptions[:i:i], e.s.Subscriptions[i+1:]...)
	tx.d.putSession(&ne)
	return removed, nil
}

// applySubscriptionCursor handles COMMAND_TYPE_SUBSCRIPTION_CURSOR. A
// cursor only moves forward; unknown sessions or subscriptions (removed
// while the batch was in flight), and cursors of a connection whose
// session was attached again since (cursorCurrent), are skipped: the
// batch carries many sessions' cursors, and one stale cursor must not
// hold back the others. Result: cursors moved.
func (s *State) applySubscriptionCursor(tx *txn, m *concordv1.SubscriptionCursorRequest) (any, error) {
	moved := 0
	for _, c := range m.GetCursors() {
		e, ok := tx.d.sessions[c.GetSessionId()]
		if !ok || !cursorCurrent(e, c.GetSessionEpoch()) {
			continue
		}
		i := subIndex(&e.s, c.GetSubscriptionId())
		if i < 0 || c.GetSeq() <= e.s.Subscriptions[i].CursorSeq {
			continue
		}
		// Only the subscription list changes: the rest of the entry,
		// immutable like every stored value, is shared with the old one.
		ne := *e
		ne.s.Subscriptions = slices.Clone(e.s.Subscriptions)
		ne.s.Subscriptions[i].CursorSeq = c.GetSeq()
		ne.s.Subscriptions[i].CursorEventID = c.GetEventId()
		tx.d.putSession(&ne)
		moved++
	}
	return moved, nil
}
