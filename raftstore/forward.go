package raftstore

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Forwarder sends a follower's command to the leader. It is declared here
// and implemented by package node (over its cluster gRPC service), which
// passes it in Config.Forwarder.
type Forwarder interface {
	// Forward has the leader propose cmd (type byte + body; the leader
	// calls ApplyForwarded) and returns what the leader answered: the
	// index the command was committed at (also when the module rejected
	// it) and, when the module's ResultCodec encoded it, the result.
	// leaderID and leaderAddr are this server's view of the leader (empty
	// when unknown); the Forwarder may retry elsewhere. Its errors are
	// returned to the Apply caller as they are, so they should match this
	// package's sentinels (ErrNoLeader, ErrLeadershipLost, ErrTimeout,
	// ...).
	Forward(ctx context.Context, leaderID, leaderAddr string, cmd []byte) (ForwardReply, error)
}

// ForwardReply is the leader's answer to a forwarded command.
type ForwardReply struct {
	// Index is the Raft index the command was committed at.
	Index uint64
	// Result is the outcome encoded by the module's ResultCodec, valid
	// when HasResult (an empty encoding is a valid one).
	Result    []byte
	HasResult bool
}

// ApplyForwarded is the leader's side of a forwarded command: ApplyRaw,
// then the outcome encoded by the module's ResultCodec when it has one
// for the type. A module's domain error is part of the reply (the command
// is committed), not an error: err is only what ApplyRaw returns besides
// a *CommandError (nothing committed, or the outcome is unknown).
func (s *Store) ApplyForwarded(ctx context.Context, cmd []byte) (ForwardReply, error) {
	var codec ResultCodec
	if len(cmd) > 0 {
		codec = s.fsm.codecs[concordv1.CommandType(cmd[0])]
	}
	// With a codec the origin answers from this reply, so the nudge may
	// wait for the next entry (nudge.go); a declined encoding below only
	// delays that origin's answer by lazyNudgeDelay. A NOOP is a
	// read-your-write fence (WaitAppliedSoon): what its origin waits for
	// was committed before it arrived, so the NOOP's own AppendEntries
	// carries that commit index, and nobody waits for the NOOP's commit.
	// A nudge would only add a second NOOP per fence (an entry on every
	// server and, on a quiet system, a round of appends to every
	// follower).
	n := nudgeLazy
	switch {
	case len(cmd) > 0 && concordv1.CommandType(cmd[0]) == concordv1.CommandType_COMMAND_TYPE_NOOP:
		n = nudgeNone
	case codec == nil:
		n = nudgeNow
	}
	res, index, err := s.applyRaw(ctx, cmd, n)
	var ce *CommandError
	switch {
	case err == nil:
	case errors.As(err, &ce):
		index, err = ce.Index, ce.Err
	default:
		return ForwardReply{}, err
	}
	reply := ForwardReply{Index: index}
	if codec != nil {
		reply.Result, reply.HasResult = codec.EncodeResult(concordv1.CommandType(cmd[0]), Result{Value: res, Err: err})
	}
	return reply, nil
}

// ApplyForwardedFrom is ApplyForwarded for a command forwarded by the
// server origin (its raft server ID). Two forwards mean that a client
// there waits for entries to reach it; if origin is a non-voter, the
// leader's pacing then sends it an append within
// NonvoterReplicationInterval instead of the background interval
// (pace.go). A NOOP is a read-your-write fence (WaitAppliedSoon): what it
// waits for is committed already, so it hurries at once, for this
// leader's commit index, rather than after the NOOP's own commit. A
// command answered without an encoded result is applied by the origin
// before it answers, so it hurries once committed, for its index.
func (s *Store) ApplyForwardedFrom(ctx context.Context, origin string, cmd []byte) (ForwardReply, error) {
	if origin == "" || s.trans == nil {
		return s.ApplyForwarded(ctx, cmd)
	}
	fence := len(cmd) > 0 && concordv1.CommandType(cmd[0]) == concordv1.CommandType_COMMAND_TYPE_NOOP
	if fence && s.raft.State() == raft.Leader {
		s.trans.pace.hurry(raft.ServerID(origin), s.raft.CommitIndex())
	}
	reply, err := s.ApplyForwarded(ctx, cmd)
	if err == nil && !reply.HasResult && !fence {
		s.trans.pace.hurry(raft.ServerID(origin), reply.Index)
	}
	return reply, err
}

// forward sends data to the leader through the Forwarder. When the leader
// returned the result encoded by the module's ResultCodec, forward answers
// with it at once: the command is committed, and this replica will compute
// the same result when it applies the entry. The caller must then call
// WaitApplied(index) before it reads this replica's state and expects the
// command's effect (node/mapsvc keeps a per-connection fence for that).
// Otherwise forward waits until this FSM has applied the index and returns
// the result this FSM computed: every replica computes the same result, so
// the caller sees exactly what the leader's proposer would have seen.
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
	reply, err := s.cfg.Forwarder.Forward(ctx, id, addr, data)
	index := reply.Index
	if err != nil {
		return nil, index, err
	}
	if reply.HasResult {
		if codec := s.fsm.codecs[t]; codec != nil {
			r, derr := codec.DecodeResult(t, reply.Result)
			if derr == nil {
				return commandResult(t, index, r.Value, r.Err)
			}
			// A leader of another version, or damage: this replica's own
			// apply gives the same result, only later.
			s.log.Warn("forwarded result not decodable; waiting for the local apply", "command_type", t.String(), "index", index, "err", derr)
		}
	}
	if err := s.WaitApplied(ctx, index); err != nil {
		return nil, index, err
	}
	resp, ok := s.fsm.takeResult(index)
	if !ok {
		return nil, index, ErrResultUnavailable
	}
	if r, ok := resp.(*applyResult); ok {
		return commandResult(t, index, r.result(), r.err)
	}
	return nil, index, nil
}

// commandResult is Apply's return for a committed command: a module's
// domain error comes back wrapped in *CommandError.
func commandResult(t concordv1.CommandType, index uint64, value any, err error) (any, uint64, error) {
	if err != nil {
		return value, index, &CommandError{Type: t, Index: index, Err: err}
	}
	return value, index, nil
}
