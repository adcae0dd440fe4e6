package fanout

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// SubscribeResult is map/subscribe's result.
type SubscribeResult struct {
	SubscriptionID string `json:"subscriptionId"`
}

// UnsubscribeResult is map/unsubscribe's result.
type UnsubscribeResult struct {
	Unsubscribed bool               `json:"unsubscribed"`
	Subscription ClosedSubscription `json:"subscription"`
}

// ClosedSubscription identifies the subscription map/unsubscribe closed.
type ClosedSubscription struct {
	ID       string `json:"id"`
	ClosedAt int64  `json:"closedAt"`
}

// Subscribe handles map/subscribe for a session attached to this node:
// it validates the params, resolves the replay start (replayFrom /
// fromEventId, exclusive), proposes SUBSCRIPTION_ADD (the subscription is
// replicated, so it survives the loss of this node) and starts delivering.
// Replayed events come first, in log order, then live ones, with no gap
// and no duplicate between them: both are read from the same log position.
// epoch is the attach epoch of the calling connection (0: unknown): the
// subscription's writes quote it, so one that reaches the log after the
// session moved on is refused (Config.FSMLevel).
func (h *Hub) Subscribe(ctx context.Context, sessionID string, epoch uint64, params json.RawMessage) (any, error) {
	sp, err := parseSubscribe(params)
	if err != nil {
		return nil, err
	}
	sess, ok := h.reg.Session(sessionID)
	if !ok {
		return nil, fmt.Errorf("subscribe: %w: %s", ErrUnknownSession, sessionID)
	}
	pos, cursorID, err := h.startPosition(sp.start)
	if err != nil {
		return nil, err
	}
	id := ulid.Make().String()
	rec := &concordv1.SubscriptionRecord{
		Id: id, SessionId: sessionID, Filter: sp.rawFilter, Options: sp.rawOptions,
		CreatedAt: h.now().UnixMilli(), CursorEventId: cursorID,
	}
	err = h.proposeWait(ctx, concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD,
		&concordv1.SubscriptionAddRequest{Meta: h.meta(sess.ParticipantID), Subscription: rec, SessionEpoch: quoted(h.quoteEpochs(ctx), epoch)})
	if err != nil {
		return nil, fmt.Errorf("propose subscription add: %w", err)
	}
	s := &sub{id: id, sessionID: sessionID, epoch: epoch, participantID: sess.ParticipantID, participantType: sess.ParticipantType, filter: sp.filter,
		opts: sp.opts, pos: pos, lastRegID: cursorID}
	h.mu.Lock()
	h.addLocked(s)
	h.mu.Unlock()
	h.armActivation(ctx, []*sub{s})
	h.poke()
	return SubscribeResult{SubscriptionID: id}, nil
}

// Unsubscribe handles map/unsubscribe {subscriptionId}: SUBSCRIPTION_REMOVE,
// then local delivery stops. An id the session does not own is -32602.
// epoch: as in Subscribe.
func (h *Hub) Unsubscribe(ctx context.Context, sessionID string, epoch uint64, params json.RawMessage) (any, error) {
	obj, err := rpc.ParseParams(params)
	if err != nil {
		return nil, err
	}
	id, err := obj.RequiredString("subscriptionId")
	if err != nil {
		return nil, err
	}
	if !h.owns(sessionID, id) {
		return nil, rpc.InvalidParams("subscriptionId", "unknown subscription "+id)
	}
	err = h.proposeWait(ctx, concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_REMOVE,
		&concordv1.SubscriptionRemoveRequest{Meta: h.meta(""), SessionId: sessionID, SubscriptionId: id,
			SessionEpoch: quoted(h.quoteEpochs(ctx), epoch)})
	if err != nil {
		return nil, fmt.Errorf("propose subscription remove: %w", err)
	}
	h.mu.Lock()
	if s := h.subs[id]; s != nil {
		h.removeLocked(s)
	}
	delete(h.pending, id)
	delete(h.detached, id)
	h.mu.Unlock()
	return UnsubscribeResult{Unsubscribed: true, Subscription: ClosedSubscription{ID: id, ClosedAt: h.now().UnixMilli()}}, nil
}

// proposeWait proposes a command for a client request (bounded by its ctx)
// and waits for the local replica to apply it when WaitApplied is set.
func (h *Hub) proposeWait(ctx context.Context, t concordv1.CommandType, m proto.Message) error {
	_, index, err := h.prop.Apply(ctx, t, m)
	if err == nil && h.cfg.WaitApplied != nil {
		err = h.cfg.WaitApplied(ctx, index)
	}
	return err
}

// owns reports whether the subscription belongs to the session, locally or
// in the registry.
func (h *Hub) owns(sessionID, id string) bool {
	h.mu.Lock()
	s := h.subs[id]
	h.mu.Unlock()
	if s != nil {
		return s.sessionID == sessionID
	}
	sess, ok := h.reg.Session(sessionID)
	if !ok {
		return false
	}
	for _, rs := range sess.Subscriptions {
		if rs.ID == id {
			return true
		}
	}
	return false
}

// Ack records a client acknowledgement, map/subscribe.ack {subscriptionId,
// upToSequence} or map/ack {subscriptionId, eventId}: the cursor persisted
// for the subscription becomes the last registry event the client has
// acknowledged (it never moves back). An acknowledgement older than the
// last 256 deliveries is ignored.
func (h *Hub) Ack(_ context.Context, sessionID string, params json.RawMessage) error {
	obj, err := rpc.ParseParams(params)
	if err != nil {
		return err
	}
	id, err := obj.RequiredString("subscriptionId")
	if err != nil {
		return err
	}
	upTo, bySeq, err := obj.Int("upToSequence")
	if err != nil {
		return err
	}
	readEventID := obj.String // optional when upToSequence says where
	if !bySeq {
		readEventID = obj.RequiredString
	}
	eventID, err := readEventID("eventId")
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[id]
	if s == nil || s.sessionID != sessionID {
		return rpc.InvalidParams("subscriptionId", "unknown subscription "+id)
	}
	var e ackEntry
	var found bool
	if bySeq {
		if uint64(upTo) > s.seq {
			return rpc.InvalidParams("upToSequence", "beyond the last delivered sequence number")
		}
		e, found = s.recent.bySeq(uint64(upTo))
	} else {
		e, found = s.recent.byEventID(eventID)
	}
	if found && e.seq > s.ackedSeq && e.regID != "" {
		s.ackedSeq, s.ackedID = e.seq, e.regID
	}
	return nil
}

// Attach restores, on this node, the replicated subscriptions of a session
// that (re)connected here: each resumes after its cursor event, numbering
// from the cursor's sequence number + 1 (at-least-once: events delivered
// after the last cursor flush before a node loss come again, with their
// eventIds for deduplication). A cursor that aged out of the retained log
// resumes at the oldest retained event and the client gets an overflow
// warning with reason "replay_window_exceeded". Subscriptions already
// delivering here are left alone, but for their epoch: epoch is the attach
// epoch of the connection now holding the session (see Subscribe), which
// their later cursor and removal writes quote.
func (h *Hub) Attach(ctx context.Context, sessionID string, epoch uint64) error {
	sess, ok := h.reg.Session(sessionID)
	if !ok {
		return fmt.Errorf("attach: %w: %s", ErrUnknownSession, sessionID)
	}
	now := h.now()
	var added []*sub
	h.mu.Lock()
	for _, rec := range sess.Subscriptions {
		if s := h.subs[rec.ID]; s != nil {
			s.epoch = max(s.epoch, epoch)
			continue
		}
		f, err := parseFilter(rec.Filter)
		if err != nil {
			h.log.Warn("stored subscription filter invalid; not restored", "subscription_id", rec.ID, "err", err)
			continue
		}
		opts, err := parseOptions(rec.Options)
		if err != nil {
			h.log.Warn("stored subscription options invalid; not restored", "subscription_id", rec.ID, "err", err)
			continue
		}
		s := &sub{id: rec.ID, sessionID: sessionID, epoch: epoch, participantID: sess.ParticipantID, participantType: sess.ParticipantType, filter: f, opts: opts,
			seq: rec.CursorSeq, flushedSeq: rec.CursorSeq, lastRegID: rec.CursorEventID}
		if d, ok := h.detached[rec.ID]; ok {
			s.seq = max(s.seq, d.seq) // the flush from Detach may not be applied yet
			delete(h.detached, rec.ID)
		}
		var gap bool
		s.pos, gap = h.resumePosition(rec.CursorEventID)
		if gap {
			s.ovf.gap = true
			s.ovf.add(0, "", "", now)
		}
		h.addLocked(s)
		added = append(added, s)
	}
	h.mu.Unlock()
	h.armActivation(ctx, added)
	h.poke()
	return nil
}

// Detach stops local delivery for a session whose connection is gone and
// queues its moved cursors for an immediate flush.
func (h *Hub) Detach(sessionID string) {
	now := h.now()
	h.mu.Lock()
	for _, s := range h.bySession[sessionID] {
		if id, seq := s.cursor(); seq > s.flushedSeq {
			h.pending[s.id] = pendingCursor{sessionID: sessionID, eventID: id, seq: seq, epoch: s.epoch}
		}
		h.detached[s.id] = detachedSub{seq: s.seq, at: now}
		h.removeLocked(s)
	}
	kept := h.notices[:0]
	for _, n := range h.notices {
		if n.sessionID != sessionID {
			kept = append(kept, n)
		}
	}
	h.notices = kept
	h.mu.Unlock()
	select {
	case h.flush <- struct{}{}:
	default:
	}
}
