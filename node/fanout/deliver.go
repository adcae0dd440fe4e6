package fanout

import (
	"errors"
	"strconv"
	"time"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/registry"
)

// errNoConn: the session has no live connection on this node right now.
var errNoConn = errors.New("fanout: session not connected here")

// stepBudget bounds the log events one subscription handles per step, so
// one far-behind subscription does not hold Hub.mu for long.
const stepBudget = 512

// pumpResult tells Run what a subscription needs next.
type pumpResult int

const (
	pumpIdle  pumpResult = iota // caught up
	pumpRetry                   // blocked on its connection or waiting for activation
	pumpAgain                   // more work it can do now
)

// wants applies excludeOwnEvents, the filter and visibility.
func (h *Hub) wants(s *sub, p *prepared) bool {
	if s.opts.ExcludeOwnEvents && h.own(s, p) {
		return false
	}
	return s.filter.match(p, h.reg) && h.visible(s.sessionID, s.participantID, s.participantType, &p.ev)
}

// visible applies Config.Visible (everything when unset).
func (h *Hub) visible(sessionID, participantID, participantType string, ev *registry.Event) bool {
	return h.cfg.Visible == nil || h.cfg.Visible(sessionID, participantID, participantType, ev)
}

// own: the event was caused by the subscriber (its participant, or an
// agent its session registered).
func (h *Hub) own(s *sub, p *prepared) bool {
	src := p.ev.Source
	if src == "" {
		return false
	}
	if src == s.participantID {
		return true
	}
	a, ok := h.reg.Agent(src)
	return ok && a.SessionID == s.sessionID
}

// offer hands an ephemeral event to s: straight to the connection when
// nothing is waiting, else into the bounded queue.
func (h *Hub) offer(s *sub, p *prepared, now time.Time) {
	if s.active(now) && !s.blocked && len(s.queue) == 0 && !s.ovf.due {
		if h.send(s, p, now) == nil {
			return
		}
		s.blocked = true
	}
	if len(s.queue) >= h.cfg.QueueLimit || (len(s.queue) > 0 && s.queueBytes+len(p.body) > h.cfg.QueueBytes) {
		h.drop(s, 1, p.ev.ID, p.ev.ID, now)
	} else {
		s.queue = append(s.queue, p)
		s.queueBytes += len(p.body)
	}
	h.poke() // Run arms its retry timer
}

// send delivers one event as the next sequence number.
func (h *Hub) send(s *sub, p *prepared, now time.Time) error {
	c, ok := h.conns(s.sessionID)
	if !ok {
		return errNoConn
	}
	seq := s.seq + 1
	h.buf = appendEventNotification(h.buf[:0], s.id, seq, p, now.UnixMilli(), s.opts.IncludeMessagePayloads)
	if err := c.NotifyRaw(MethodEvent, h.buf); err != nil {
		return err
	}
	s.seq = seq
	if !p.ephemeral {
		s.lastRegID = p.ev.ID
	}
	s.recent.push(ackEntry{seq: seq, eventID: p.ev.ID, regID: s.lastRegID})
	return nil
}

// pump moves s forward: a due overflow warning first, then queued
// ephemeral events, then the log after s.pos, until the connection pushes
// back or the step budget is spent.
func (h *Hub) pump(s *sub, oldest, last uint64, now time.Time) pumpResult {
	if !s.active(now) {
		return pumpRetry
	}
	if !s.ovf.since.IsZero() && now.Sub(s.ovf.since) >= h.cfg.OverflowCloseAfter {
		h.closeOverflowed(s, now)
		return pumpIdle
	}
	// Account, before any warning goes out, for the log events that aged
	// out while the subscription was stuck: the warning then covers them,
	// and only events lost after it count as staying behind.
	if first, _ := h.cache.bounds(); s.pos+1 < oldest && (len(h.cache.evs) == 0 || s.pos+1 < first) {
		h.gap(s, oldest-1, now)
		if h.subs[s.id] == nil {
			return pumpIdle
		}
	}
	if s.ovf.due && !h.sendWarning(s, now) {
		s.blocked = true
		return pumpRetry
	}
	for len(s.queue) > 0 {
		if h.send(s, s.queue[0], now) != nil {
			s.blocked = true
			return pumpRetry
		}
		s.queueBytes -= len(s.queue[0].body)
		s.queue[0] = nil
		s.queue = s.queue[1:]
	}
	s.queue, s.queueBytes = nil, 0
	if r := h.pumpLog(s, last, now); r != pumpIdle {
		return r
	}
	s.blocked = false
	if !s.ovf.due {
		s.ovf.since, s.ovf.warned = time.Time{}, false // caught up: the episode is over
	}
	return pumpIdle
}

// pumpLog delivers the log events after s.pos, up to last and the step
// budget; it returns pumpIdle once s has read up to last.
func (h *Hub) pumpLog(s *sub, last uint64, now time.Time) pumpResult {
	for budget := stepBudget; s.pos < last; {
		if budget <= 0 {
			return pumpAgain
		}
		evs := h.cache.after(h.reg, s.pos, budget)
		if len(evs) == 0 {
			return pumpIdle
		}
		if first := evs[0].ev.Position; first > s.pos+1 {
			// The window moved since this step began: same as in pump.
			h.gap(s, first-1, now)
			return pumpAgain
		}
		for _, p := range evs {
			budget--
			if h.wants(s, p) && h.send(s, p, now) != nil {
				s.blocked = true
				return pumpRetry
			}
			s.pos = p.ev.Position
		}
	}
	return pumpIdle
}

// gap skips s to pos: the log events in between aged out of the retained
// window before s could read them (counted by position, an upper bound of
// what its filter would have passed).
func (h *Hub) gap(s *sub, pos uint64, now time.Time) {
	s.ovf.gap = true
	n := int(pos - s.pos)
	s.pos = pos
	h.drop(s, n, "", "", now)
}

// drop accounts n events s could not take. Dropping again after a warning
// reached the client, before catching up, closes the subscription.
func (h *Hub) drop(s *sub, n int, oldestID, newestID string, now time.Time) {
	again := s.ovf.warned
	s.ovf.add(n, oldestID, newestID, now)
	if again || now.Sub(s.ovf.since) >= h.cfg.OverflowCloseAfter {
		h.closeOverflowed(s, now)
	}
}

// sendWarning sends the overflow warning; false if the connection refused.
func (h *Hub) sendWarning(s *sub, now time.Time) bool {
	c, ok := h.conns(s.sessionID)
	if !ok {
		return false
	}
	h.buf = appendOverflow(h.buf[:0], s, now.UnixMilli(), "reduce_filter_scope", false)
	if c.NotifyRaw(MethodOverflow, h.buf) != nil {
		return false
	}
	s.ovf.due, s.ovf.gap, s.ovf.warned = false, false, true
	s.ovf.dropped, s.ovf.oldestID, s.ovf.newestID = 0, "", ""
	return true
}

// closeOverflowed closes a subscription that stays behind: local delivery
// stops, a final notice recommends "resubscribe" (kept and retried while
// the connection is full), and the replicated subscription is removed.
func (h *Hub) closeOverflowed(s *sub, now time.Time) {
	h.removeLocked(s)
	params := appendOverflow(nil, s, now.UnixMilli(), "resubscribe", true)
	if c, ok := h.conns(s.sessionID); !ok || c.NotifyRaw(MethodOverflow, params) != nil {
		h.notices = append(h.notices, notice{sessionID: s.sessionID, params: params})
	}
	h.removals = append(h.removals, removal{sessionID: s.sessionID, subID: s.id, epoch: s.epoch})
	h.log.Warn("subscription closed: consumer stays behind", "subscription_id", s.id, "session_id", s.sessionID, "dropped", s.ovf.total)
	select {
	case h.flush <- struct{}{}:
	default:
	}
}

// retryNotices resends final overflow notices the connection refused.
func (h *Hub) retryNotices() (left bool) {
	kept := h.notices[:0]
	for _, n := range h.notices {
		if c, ok := h.conns(n.sessionID); ok && c.NotifyRaw(MethodOverflow, n.params) == nil {
			continue
		}
		kept = append(kept, n)
	}
	h.notices = kept
	return len(kept) > 0
}

// appendEventNotification encodes map/event's params.
func appendEventNotification(b []byte, subID string, seq uint64, p *prepared, ts int64, payloads bool) []byte {
	b = append(b, `{"subscriptionId":`...)
	b = jsonkit.AppendString(b, subID)
	b = append(b, `,"sequenceNumber":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"eventId":`...)
	b = jsonkit.AppendString(b, p.ev.ID)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, ts, 10)
	if len(p.ev.CausedBy) > 0 {
		b = append(b, `,"causedBy":`...)
		b = jsonkit.AppendStrings(b, p.ev.CausedBy)
	}
	b = append(b, `,"event":`...)
	b = append(b, p.bodyFor(payloads)...)
	return append(b, '}')
}

// appendOverflow encodes map/subscription.overflow's params.
func appendOverflow(b []byte, s *sub, ts int64, recommendation string, closed bool) []byte {
	b = append(b, `{"subscriptionId":`...)
	b = jsonkit.AppendString(b, s.id)
	b = append(b, `,"eventsDropped":`...)
	b = strconv.AppendInt(b, int64(s.ovf.dropped), 10)
	if s.ovf.oldestID != "" {
		b = append(b, `,"oldestDroppedId":`...)
		b = jsonkit.AppendString(b, s.ovf.oldestID)
	}
	if s.ovf.newestID != "" {
		b = append(b, `,"newestDroppedId":`...)
		b = jsonkit.AppendString(b, s.ovf.newestID)
	}
	b = append(b, `,"totalDropped":`...)
	b = strconv.AppendInt(b, int64(s.ovf.total), 10)
	if s.ovf.gap {
		b = append(b, `,"reason":"replay_window_exceeded"`...)
	}
	b = append(b, `,"recommendation":`...)
	b = jsonkit.AppendString(b, recommendation)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, ts, 10)
	if closed {
		b = append(b, `,"closed":true`...)
	}
	return append(b, '}')
}
