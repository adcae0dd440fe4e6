package mapsvc

import (
	"context"
	"time"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// orphanWatch finds "ghost" sessions: connected and homed on this node in
// the registry while no local connection holds them. They come from a
// snapshot restored after the connection closed, or from this node's
// previous life (it crashed and restarted before gossip saw it fail, so
// the leader's dead-node sweep never ran). Only the home node can tell
// that it has no connection, so it detaches them itself. A session must
// have been seen orphaned at the same epoch for OrphanGrace, across at
// least two passes, before it is detached: a connection being set up
// registers only after its SESSION_OPEN is applied (Sessions.beginOpen
// covers that window; the grace also covers a replica that lags).
//
// Owned by the Run loop; not safe for concurrent use.
type orphanWatch struct {
	grace time.Duration
	seen  map[string]orphanSeen // by session id
	pass  uint64
}

type orphanSeen struct {
	epoch uint64
	since time.Time
	pass  uint64
}

func newOrphanWatch(grace time.Duration) *orphanWatch {
	return &orphanWatch{grace: grace, seen: map[string]orphanSeen{}}
}

// observe takes the sessions the registry shows connected here and
// whether a local connection holds (or is opening) each; it forgets the
// sessions that are no longer orphans and returns those orphaned at the
// same epoch for the grace, since an earlier pass.
func (w *orphanWatch) observe(now time.Time, homed []registry.HomedSession, held func(id string) bool) []registry.HomedSession {
	w.pass++
	live := make(map[string]struct{}, len(homed))
	var due []registry.HomedSession
	for _, h := range homed {
		if held(h.ID) {
			continue
		}
		live[h.ID] = struct{}{}
		o, ok := w.seen[h.ID]
		if !ok || o.epoch != h.Epoch {
			w.seen[h.ID] = orphanSeen{epoch: h.Epoch, since: now, pass: w.pass}
			continue
		}
		if o.pass < w.pass && now.Sub(o.since) >= w.grace {
			due = append(due, h)
		}
	}
	for id := range w.seen {
		if _, ok := live[id]; !ok {
			delete(w.seen, id)
		}
	}
	return due
}

// detachOrphans proposes SESSION_DETACH, as a lost connection does, for
// the sessions orphanWatch finds due, so their disconnect policies apply
// and a participant can still resume them. The detach quotes the epoch the
// session was seen orphaned at: a resume committed since (here or
// elsewhere) makes it a no-op in the registry, and held is checked again
// just before proposing.
func (s *Service) detachOrphans(ctx context.Context) {
	due := s.orphans.observe(s.cfg.Clock(), s.reg.ConnectedOn(s.cfg.NodeID), s.sessions.held)
	for _, h := range due {
		if s.sessions.held(h.ID) {
			continue
		}
		if cur, ok := s.reg.SessionEpoch(h.ID); !ok || cur != h.Epoch {
			continue
		}
		sess, _ := s.reg.Session(h.ID)
		s.log.Warn("session connected here in the registry but no local connection holds it (restored snapshot or previous run); detaching it",
			"session_id", h.ID, "participant_id", sess.ParticipantID, "epoch", h.Epoch)
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CloseTimeout)
		_, err := s.propose(cctx, concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH, &concordv1.SessionDetachRequest{
			Meta:      s.meta(sess.ParticipantID, 1+len(s.reg.SessionAgents(h.ID))),
			SessionId: h.ID, Epoch: h.Epoch, Reason: "no connection on its home node", HomeNode: s.cfg.NodeID,
			TtlMs: s.cfg.DetachedSessionTTL.Milliseconds(),
		})
		cancel()
		if err != nil {
			s.log.Warn("detach orphaned session failed", "session_id", h.ID, "err", err)
			return // the next pass retries: the session is still seen orphaned
		}
	}
}
