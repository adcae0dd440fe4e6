package mapsvc

import (
	"context"
	"time"

	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Run is the service's background loop; it returns ctx.Err() when ctx is
// done. It starts no goroutines of its own: the caller owns it.
//
// On every node it closes local connections whose session was resumed on
// another node (the registry shows a newer epoch homed elsewhere) or
// detached while the connection is open (closeLost), and warns, then
// closes, sessions whose credential expires or is revoked (credentials.go).
// On every full pass it detaches sessions the registry shows connected
// here though no local connection holds them (orphans.go).
// While the local store is the leader it also proposes SESSION_EXPIRE for
// detached sessions whose grace period or TTL has ended (deadlines come
// from the detach command's timestamp, so a new leader continues where the
// old one stopped, and the registry ignores duplicates), and, with
// Config.NodeAlive, SESSION_DETACH for sessions attached to dead nodes.
// It wakes every ExpiryInterval and on registry events.
//
// Every connect is a registry event, and a pass over every connection or
// every detached session on each one made n connects cost O(n^2) (issue
// 10). So a wake-up on an event rescans the local connections only when a
// session was re-attached, or detached by a node other than its home,
// since the last scan, and looks for due expiries only when a session was
// detached since the last look
// (registry.State.SessionChanges); the ticker's pass does both always,
// which also covers a connection that recorded its epoch just after a
// scan, and deadlines that pass with no event.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ExpiryInterval)
	defer t.Stop()
	// Credentials are checked on their own timer (the next warning, expiry
	// or grace end, at most ExpiryInterval away) and when the stored
	// credentials change, not on every registry event: a busy node has
	// many sessions and many events.
	ct := time.NewTimer(0)
	defer ct.Stop()
	var scanned, looked uint64 // the counters at the last scan / look
	full := true
	for {
		wake, creds := s.reg.Notify(), s.credentialsChanged()
		moves, detaches := s.reg.SessionChanges()
		if full || moves != scanned {
			scanned = moves
			s.closeLost()
		}
		if full {
			s.detachOrphans(ctx)
		}
		if full || detaches != looked {
			looked = detaches
			s.leaderDuties(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			full = true
		case <-wake:
			full = false
			if s.cfg.WaitApplyBatch != nil {
				s.cfg.WaitApplyBatch(ctx)
			}
		case <-creds:
			s.checkCredentials()
			ct.Reset(s.nextCredentialDeadline(s.cfg.ExpiryInterval))
		case <-ct.C:
			s.checkCredentials()
			ct.Reset(s.nextCredentialDeadline(s.cfg.ExpiryInterval))
		}
	}
}

// leaderDuties proposes due expiries and detaches sessions of dead nodes,
// on the leader only.
func (s *Service) leaderDuties(ctx context.Context) {
	if !s.cfg.IsLeader() {
		return
	}
	s.expireDue(ctx)
	if s.cfg.NodeAlive != nil {
		s.detachDeadNodes(ctx)
	}
}

// closeLost closes local connections that lost their session while open:
//
//   - resumed on another node (attached elsewhere at a newer epoch): the
//     participant is served there; this connection is a stale one.
//   - detached at a newer epoch though this connection never closed (its
//     own close releases it first, and map/disconnect sets ClosedAt): the
//     leader detached the session of a node gossip wrongly declared failed
//     (a missed probe under load) and that rejoined. Routing now treats
//     the participant as gone, so the open connection would receive
//     nothing, ever. Closing it with the reconnect code (1012) makes the
//     client resume the session (here or elsewhere), which re-attaches it
//     and re-homes or reclaims its agents; re-attaching it from here
//     instead could not bring back agents the disconnect policy
//     unregistered, and the client would go on believing it owns them.
//
// Only a newer epoch in the local replica counts, so a replica that lags
// never closes a healthy connection.
func (s *Service) closeLost() {
	s.sessions.each(func(id string, a *attached) {
		mine := a.state.attachEpoch()
		reg, found := s.reg.SessionAttachment(id)
		if !found || reg.Epoch <= mine {
			return
		}
		switch {
		case reg.Connected && reg.HomeNode != s.cfg.NodeID:
			s.log.Info("session resumed on another node; closing local connection", "session_id", id, "peer", reg.HomeNode)
			_ = a.conn.Close("session resumed on another node")
		case !reg.Connected && !reg.Closed && mine != 0:
			s.log.Warn("session detached while its connection is open (node wrongly declared failed?); closing it so the client resumes",
				"session_id", id, "epoch", mine, "registry_epoch", reg.Epoch)
			_ = a.conn.CloseToReconnect("session detached by the cluster: reconnect and resume")
		}
	})
}

// expireDue proposes SESSION_EXPIRE for every deadline that has passed.
func (s *Service) expireDue(ctx context.Context) {
	for _, e := range s.reg.DueExpiries(s.now()) {
		if err := s.proposeExpire(ctx, e); err != nil {
			s.log.Warn("session expiry failed", "session_id", e.SessionID, "kind", e.Kind, "err", err)
			return
		}
	}
}

func (s *Service) proposeExpire(ctx context.Context, e registry.Expiry) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CloseTimeout)
	defer cancel()
	res, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE, &concordv1.SessionExpireRequest{
		Meta:      s.meta("", 1+len(s.reg.SessionAgents(e.SessionID))),
		SessionId: e.SessionID, Epoch: e.Epoch, Kind: e.Kind,
	})
	if err == nil {
		dr := res.(registry.DetachResult)
		s.log.Debug("session expiry", "session_id", e.SessionID, "kind", e.Kind, "applied", dr.Applied, "unregistered", len(dr.Unregistered))
	}
	return err
}

// detachDeadNodes detaches sessions still marked connected to a node that
// is no longer a live member, so their disconnect policies apply.
func (s *Service) detachDeadNodes(ctx context.Context) {
	for _, sess := range s.reg.Sessions() {
		if !sess.Connected || sess.HomeNode == "" || sess.HomeNode == s.cfg.NodeID || s.cfg.NodeAlive(sess.HomeNode) {
			continue
		}
		epoch, _ := s.reg.SessionEpoch(sess.ID)
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CloseTimeout)
		_, err := s.propose(cctx, concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH, &concordv1.SessionDetachRequest{
			Meta:      s.meta("", 1+len(s.reg.SessionAgents(sess.ID))),
			SessionId: sess.ID, Epoch: epoch, Reason: "node " + sess.HomeNode + " failed", HomeNode: sess.HomeNode,
			TtlMs: s.cfg.DetachedSessionTTL.Milliseconds(),
		})
		cancel()
		if err != nil {
			s.log.Warn("detach session of dead node failed", "session_id", sess.ID, "peer", sess.HomeNode, "err", err)
			return
		}
	}
}
