package federation

import (
	"context"
	"fmt"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Unlink removes the link to peer here and keeps a pending-unlink record
// in the same Raft entry; it then tells the peer once, and when the peer
// was not reached the leader retries (retryUnlinks) until it confirms.
// force removes without keeping a record (the peer is gone for good), and
// drops a pending record of a link already removed.
func (m *Manager) Unlink(ctx context.Context, peer string, force bool) (*concordv1.UnlinkResponse, error) {
	link, linked := m.deps.State.Link(peer)
	if !linked && m.deps.Barrier != nil {
		// This replica may not have applied a link made through another
		// node a moment ago.
		if err := m.deps.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("catch up before unlinking %s: %w", peer, err)
		}
		link, linked = m.deps.State.Link(peer)
	}
	if !linked {
		if force && m.pendingUnlink(peer) != nil {
			if err := m.unlinkDone(ctx, peer); err != nil {
				return nil, err
			}
			m.log.Warn("pending unlink dropped by the operator; the peer may keep its side", "peer", peer)
			return &concordv1.UnlinkResponse{}, nil
		}
		return nil, fmt.Errorf("%w: %s", ErrNoLink, peer)
	}
	// A foreign MAP server keeps no link state: nothing to tell, nothing
	// pending (neither notified nor an error).
	mapLink := isMapLink(link)
	if _, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_REMOVE,
		&concordv1.FedLinkRemove{PeerSystemId: peer, NotifyPeer: !force && !mapLink, NowMs: m.now().UnixMilli()}); err != nil {
		return nil, err
	}
	if mapLink {
		return &concordv1.UnlinkResponse{MapLink: true}, nil
	}
	nctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout) // one try; the leader retries
	err := m.notifyUnlink(nctx, link)
	cancel()
	switch {
	case err == nil && !force:
		if derr := m.unlinkDone(ctx, peer); derr != nil {
			m.log.Debug("clear pending unlink (the leader will)", "peer", peer, "err", derr)
		}
		return &concordv1.UnlinkResponse{PeerNotified: true}, nil
	case err == nil:
		return &concordv1.UnlinkResponse{PeerNotified: true}, nil
	}
	m.log.Warn("peer not told of the unlink", "peer", peer, "err", err, "retrying", !force)
	return &concordv1.UnlinkResponse{PeerError: err.Error(), Pending: !force}, nil
}

func (m *Manager) pendingUnlink(peer string) *concordv1.FedPendingUnlink {
	for _, p := range m.deps.State.PendingUnlinks() {
		if p.GetLink().GetPeerSystemId() == peer {
			return p
		}
	}
	return nil
}

func (m *Manager) unlinkDone(ctx context.Context, peer string) error {
	_, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_UNLINK_DONE, &concordv1.FedUnlinkDone{PeerSystemId: peer})
	return err
}

// retryUnlinks tells peers of unlinks they have not confirmed, on the
// leader, every UnlinkRetry, until ctx ends.
func (m *Manager) retryUnlinks(ctx context.Context) {
	t := time.NewTicker(m.cfg.UnlinkRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !m.deps.IsLeader() {
			continue
		}
		for _, p := range m.deps.State.PendingUnlinks() {
			peer := p.GetLink().GetPeerSystemId()
			if err := m.notifyUnlink(ctx, p.GetLink()); err != nil {
				m.log.Debug("peer still not told of the unlink", "peer", peer, "err", err)
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
			err := m.unlinkDone(cctx, peer)
			cancel()
			if err != nil {
				m.log.Debug("clear pending unlink", "peer", peer, "err", err)
				continue
			}
			m.log.Info("peer confirmed the unlink", "peer", peer)
		}
	}
}
