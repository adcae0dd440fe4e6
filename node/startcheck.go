package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/concordmap/concord/node/membership"
)

// Start-up problems that retrying cannot fix are reported as what they are,
// not as the "not ready" they cause.

// startWatched runs start, failing it at once when gossip gives up for
// good (a gossip key the seeds refuse): waiting for peers or a leader
// until ReadyTimeout would only end in a message that hides the cause.
//
// Only start's own waits are cut short: the gossip join loop keeps the
// caller's ctx, as before, so a node ready through Raft before gossip
// joined goes on joining.
func (s *Server) startWatched(joinCtx context.Context) error {
	ctx, cancel := context.WithCancelCause(joinCtx)
	defer cancel(nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // ends when start returns (stop) or gossip gives up
		defer close(done)
		select {
		case <-s.membership.Fatal():
			cancel(s.membership.FatalErr())
		case <-stop:
		}
	}()
	err := s.start(joinCtx, ctx)
	close(stop)
	<-done
	if halt := s.store.HaltErr(); err != nil && halt != nil {
		s.closeFatal(halt)
	}
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, membership.ErrGossipKey) {
		return cause
	}
	return err
}

// notConfiguredReason says what an operator can do about a node that the
// Raft configuration no longer holds.
const notConfiguredReason = "this node is not in the raft configuration (it was removed, e.g. by concord raft remove-peer --force): " +
	"the leader adds it back as soon as gossip sees it as a new process, so a restart lets it in; " +
	"if it stays out, check concord members and concord raft peers on a running node"

// outOfConfiguration reports whether this node has Raft state but is not
// in the configuration it knows: it was removed, and no leader will talk
// to it until it is added back.
func (s *Server) outOfConfiguration() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	servers, err := s.store.Configuration(ctx)
	if err != nil || len(servers) == 0 {
		return false
	}
	for _, sv := range servers {
		if sv.ID == s.cfg.NodeID {
			// The entry that removed it may never have arrived: a leader's
			// last append to a removed server is best effort.
			return s.removedPerLeader()
		}
	}
	return true
}

// checkRaftVoters refuses to run beside a server that advertises another
// target number of voters (--raft-voters): the leader would not add this
// node (or the other one), and two targets would fight over promotions.
func (s *Server) checkRaftVoters() error {
	return raftVotersConflict(s.cfg.NodeID, s.cfg.Cluster.RaftVoters, s.membership.Members())
}

// raftVotersConflict reports the alive peer whose --raft-voters differs
// from want, as the error this node stops with. Once the system exists
// (some alive server, this one included, advertises Raft state), only
// such established servers count: a joining server with the wrong value
// is the one to stop, and it must not take down a correct server that
// happens to be starting beside it. Before the system exists nobody can
// tell who is wrong, so any difference stops the node. Peers of older
// versions advertise no value and are not checked.
func raftVotersConflict(self string, want int, members []membership.Member) error {
	established := false
	for _, m := range members {
		if m.Status == membership.StatusAlive && m.Bootstrapped {
			established = true
		}
	}
	for _, m := range members {
		if m.ID == self || m.Status != membership.StatusAlive || m.RaftVoters == 0 || m.RaftVoters == want {
			continue
		}
		if established && !m.Bootstrapped {
			continue // a newcomer: it sees the system's value and stops itself
		}
		return fmt.Errorf("node: --raft-voters is %d here but %d on %s: every server of a system must use the same value: %w",
			want, m.RaftVoters, m.ID, ErrRaftVotersMismatch)
	}
	return nil
}

// ErrRaftVotersMismatch is matched (errors.Is) by Start's error when a
// peer runs with another --raft-voters.
var ErrRaftVotersMismatch = errors.New("raft-voters mismatch")
