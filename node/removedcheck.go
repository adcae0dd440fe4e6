package node

import (
	"context"
	"slices"
	"sync"
	"time"
)

// A follower removed from the Raft configuration learns it only from the
// entry that removed it, and the leader's last append to a removed server
// is best effort. Without it the node campaigns forever (its pre-votes
// refused) and reports only "no raft leader". When it has heard no leader
// for a while, it asks a live peer for the leader's configuration instead.
// The answer only feeds readiness and drain reporting, never Raft.

const (
	// removedCheckTTL is how long an answer is reused.
	removedCheckTTL = 2 * time.Second
	// removedCheckTimeout bounds one round of RaftPeers calls, and
	// removedCallTimeout each call: a peer cut off must not use it up.
	removedCheckTimeout = time.Second
	removedCallTimeout  = 400 * time.Millisecond
)

// removedCheck caches the last answer. mu is held across the probe, so
// concurrent readiness checks make one round of calls, not one each.
type removedCheck struct {
	mu  sync.Mutex
	at  time.Time // zero: never asked
	out bool
}

// removedPerLeader reports whether a leader's configuration, fetched from
// live peers, leaves this node out. It asks only after this node has heard
// no leader for more than a few election timeouts.
func (s *Server) removedPerLeader() bool {
	if s.cluster == nil || !silentLongEnough(s.store.Stats()["last_contact"], 3*s.cfg.Raft.ElectionTimeout) {
		return false
	}
	s.removed.mu.Lock()
	defer s.removed.mu.Unlock()
	if now := time.Now(); !s.removed.at.IsZero() && now.Sub(s.removed.at) < removedCheckTTL {
		return s.removed.out
	}
	ctx, cancel := context.WithTimeout(context.Background(), removedCheckTimeout)
	defer cancel()
	ids, err := s.cluster.LeaderConfiguration(ctx, removedCallTimeout)
	s.removed.out = leftOut(s.cfg.NodeID, ids, err)
	s.removed.at = time.Now()
	if err != nil {
		s.log.Debug("no leader configuration from peers", "err", err)
	}
	return s.removed.out
}

// silentLongEnough reports whether raft's last_contact stat (a duration,
// or "never" before any leader) exceeds silence. A node that never heard a
// leader is starting, not removed.
func silentLongEnough(lastContact string, silence time.Duration) bool {
	d, err := time.ParseDuration(lastContact)
	return err == nil && d > silence
}

// leftOut reports whether the leader's configuration ids, fetched with
// err, proves node self is not in it. No answer proves nothing.
func leftOut(self string, ids []string, err error) bool {
	return err == nil && len(ids) > 0 && !slices.Contains(ids, self)
}
