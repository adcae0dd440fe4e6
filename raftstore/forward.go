package raftstore

import (
	"context"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Forwarder sends a follower's command to the leader. It is declared here
// and implemented by package node (over its cluster gRPC service), which
// passes it in Config.Forwarder.
type Forwarder interface {
	// Forward has the leader propose cmd (type byte + body; the leader
	// calls ApplyRaw) and returns the index the command was committed at,
	// also when the module rejected it. leaderID and leaderAddr are this
	// server's view of the leader (empty when unknown); the Forwarder may
	// retry elsewhere. Its errors are returned to the Apply caller as
	// they are, so they should match this package's sentinels
	// (ErrNoLeader, ErrLeadershipLost, ErrTimeout, ...).
	Forward(ctx context.Context, leaderID, leaderAddr string, cmd []byte) (index uint64, err error)
}

// forward sends data to the leader through the Forwarder, waits until this
// FSM has applied the returned index, and returns the result this FSM
// computed for it: every replica computes the same result, so the caller
// sees exactly what the leader's proposer would have seen.
func (s *Store) forward(ctx context.Context, t concordv1.CommandType, data []byte) (any, uint64, error) {
	if err := s.enter(); err != nil {
		return nil, 0, err
	}
	defer s.leave()
	ctx, cancel := s.withDefaultTimeout(ctx)
	defer cancel()
	// Start keeping results before the leader can append the command.
	call := s.fsm.beginForward()
	defer s.fsm.endForward(call)

	id, addr := s.Leader()
	index, err := s.cfg.Forwarder.Forward(ctx, id, addr, data)
	if err != nil {
		return nil, index, err
	}
	if err := s.WaitApplied(ctx, index); err != nil {
		return nil, index, err
	}
	resp, ok := s.fsm.takeResult(index)
	if !ok {
		return nil, index, ErrResultUnavailable
	}
	if r, ok := resp.(*applyResult); ok {
		if r.err != nil {
			return r.value, index, &CommandError{Type: t, Index: index, Err: r.err}
		}
		return r.value, index, nil
	}
	return nil, index, nil
}
