package raftstore

import (
	"context"
	"errors"
	"fmt"
)

// WaitAppliedSoon is WaitApplied for a caller that cannot wait for the
// leader's lazy nudge (nudge.go): when index is not applied here yet and
// this server is a follower with a Forwarder, it first asks the leader to
// append a NOOP, whose AppendEntries carries the current commit index to
// every follower, so the wait is about one replication round rather than
// lazyNudgeDelay plus one. node/mapsvc calls it for its read-your-writes
// fence: a read right after a write answered with the leader's result.
// When ctx expires while this server knows no leader, the error is
// ErrNoLeader (as well as ErrTimeout): it lost the leader, so it will not
// catch up until it finds one.
func (s *Store) WaitAppliedSoon(ctx context.Context, index uint64) error {
	if s.fsm.applied.Load() < index && s.cfg.Forwarder != nil {
		select {
		case s.hurryCh <- struct{}{}:
		default: // a request is pending; its NOOP carries this index too
		}
	}
	err := s.WaitApplied(ctx, index)
	if errors.Is(err, ErrTimeout) {
		if id, _ := s.Leader(); id == "" {
			// Cut off from the leader (a partition, an election): say
			// so, as a write through this server would.
			return fmt.Errorf("%w: waiting to apply index %d: %w", ErrNoLeader, index, err)
		}
	}
	return err
}

// startHurrier starts the goroutine that turns WaitAppliedSoon's requests
// into NOOPs forwarded to the leader, one at a time: requests that arrive
// meanwhile are covered by one more after it. Shutdown stops it (stopCh)
// and waits for it (bg).
func (s *Store) startHurrier() {
	if s.cfg.Forwarder == nil {
		return
	}
	// life ends at Shutdown, and with it a call in flight: the Forwarder
	// may retry for seconds while no leader is known.
	life, end := context.WithCancel(context.Background())
	s.bg.Go(func() {
		defer end()
		<-s.stopCh
	})
	s.bg.Go(func() {
		for {
			select {
			case <-s.stopCh:
				return
			case <-s.hurryCh:
			}
			ctx, cancel := context.WithTimeout(life, s.cfg.ApplyTimeout)
			id, addr := s.Leader()
			if id != "" && id != s.cfg.NodeID {
				// Only the append matters (its AppendEntries carries the
				// commit index); the NOOP's own commit and any error are
				// of no interest.
				if _, err := s.cfg.Forwarder.Forward(ctx, id, addr, nudgeBody); err != nil {
					s.log.Debug("commit index request not forwarded", "err", err)
				}
			}
			cancel()
		}
	})
}
