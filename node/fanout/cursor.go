package fanout

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// detachedTTL bounds how long the local state of a detached subscription
// is remembered for a reattach on this node.
const detachedTTL = 10 * time.Minute

// cursorLoop proposes moved cursors every CursorFlushInterval and when
// poked (Detach, an overflow close), and removals of closed subscriptions.
func (h *Hub) cursorLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.CursorFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Last flush on the way out, so a clean shutdown loses no cursor.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ProposeTimeout)
			h.flushCursors(fctx)
			cancel()
			return
		case <-t.C:
		case <-h.flush:
		}
		h.flushCursors(ctx)
	}
}

type flushMark struct {
	s   *sub
	seq uint64
}

// flushCursors proposes one SUBSCRIPTION_CURSOR with every cursor that
// moved since the last successful flush, then the pending removals.
func (h *Hub) flushCursors(ctx context.Context) {
	now := h.now()
	quote := h.quoteEpochs(ctx)
	h.mu.Lock()
	var cursors []*concordv1.SubscriptionCursor
	var marks []flushMark
	for _, s := range h.subs {
		if id, seq := s.cursor(); seq > s.flushedSeq {
			cursors = append(cursors, &concordv1.SubscriptionCursor{SessionId: s.sessionID, SubscriptionId: s.id, EventId: id, Seq: seq,
				SessionEpoch: quoted(quote, s.epoch)})
			marks = append(marks, flushMark{s, seq})
		}
	}
	pending := h.pending
	h.pending = map[string]pendingCursor{}
	for id, pc := range pending {
		cursors = append(cursors, &concordv1.SubscriptionCursor{SessionId: pc.sessionID, SubscriptionId: id, EventId: pc.eventID, Seq: pc.seq,
			SessionEpoch: quoted(quote, pc.epoch)})
	}
	removals := h.removals
	h.removals = nil
	for id, d := range h.detached {
		if now.Sub(d.at) > detachedTTL {
			delete(h.detached, id)
		}
	}
	h.mu.Unlock()

	if len(cursors) > 0 {
		err := h.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_CURSOR,
			&concordv1.SubscriptionCursorRequest{Meta: h.meta(""), Cursors: cursors})
		h.mu.Lock()
		if err == nil {
			for _, m := range marks {
				m.s.flushedSeq = max(m.s.flushedSeq, m.seq)
			}
		} else {
			for id, pc := range pending {
				if _, newer := h.pending[id]; !newer {
					h.pending[id] = pc
				}
			}
		}
		h.mu.Unlock()
		if err != nil {
			h.log.Warn("cursor flush failed", "cursors", len(cursors), "err", err)
		}
	}
	for _, r := range removals {
		err := h.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_REMOVE,
			&concordv1.SubscriptionRemoveRequest{Meta: h.meta(""), SessionId: r.sessionID, SubscriptionId: r.subID,
				SessionEpoch: quoted(quote, r.epoch)})
		switch {
		case errors.Is(err, registry.ErrSessionMoved):
			// The session was attached again (or detached) before the
			// removal committed: it is no longer this connection's to
			// change, and its new connection restored the subscription.
			h.log.Info("closed subscription not removed: its session moved on", "subscription_id", r.subID, "session_id", r.sessionID)
		case err != nil:
			h.log.Warn("remove closed subscription failed", "subscription_id", r.subID, "err", err)
		}
	}
}

// propose applies a command the hub makes on its own, bounded by
// ProposeTimeout.
func (h *Hub) propose(ctx context.Context, t concordv1.CommandType, m proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.ProposeTimeout)
	defer cancel()
	_, _, err := h.prop.Apply(ctx, t, m)
	return err
}

// quoteEpochs reports whether the hub's writes may quote the attach epoch
// of the connection they are made for (session_epoch): only once every
// server enforces it (registry.FSMLevelSessionWrites, Config.FSMLevel),
// so that every replica applies them alike.
func (h *Hub) quoteEpochs(ctx context.Context) bool {
	return h.cfg.FSMLevel != nil && h.cfg.FSMLevel(ctx) >= registry.FSMLevelSessionWrites
}

// quoted is epoch when quote is set, else 0 (no precondition).
func quoted(quote bool, epoch uint64) uint64 {
	if quote {
		return epoch
	}
	return 0
}

// meta is the CommandMeta of a hub proposal (these commands emit no events).
func (h *Hub) meta(source string) *concordv1.CommandMeta {
	return &concordv1.CommandMeta{TimestampMs: h.now().UnixMilli(), NodeId: h.cfg.NodeID, Source: source}
}
