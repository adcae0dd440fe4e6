package raftstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Server is one member of the raft configuration.
type Server struct {
	// ID is the server's raft ID (its node ID).
	ID string
	// Address is its raft transport address (host:port).
	Address string
	// Voter is true for voting members. BootstrapCluster ignores it (every
	// bootstrap server votes); Configuration reports it. A non-voter
	// replicates the log and serves reads but takes no part in elections
	// or commit quorums.
	Voter bool
}

// BootstrapSelf makes this server a one-voter cluster, if it has no raft
// state yet. On a server that already has state (a restart, or a member
// of an existing cluster) it does nothing and returns nil, so it is safe
// to call on every start. It does not wait for the election that follows;
// use WaitForLeader.
func (s *Store) BootstrapSelf(ctx context.Context) error {
	return s.BootstrapCluster(ctx, []Server{{ID: s.id, Address: s.Addr()}})
}

// BootstrapCluster writes the initial configuration (all voters) on this
// server. Every listed server must be bootstrapped with the same list, or
// only one of them bootstrapped and the rest added with AddVoter. Like
// BootstrapSelf it returns nil when the server already has raft state.
func (s *Store) BootstrapCluster(ctx context.Context, servers []Server) error {
	if len(servers) == 0 {
		return errors.New("raftstore: bootstrap with no servers")
	}
	conf := raft.Configuration{Servers: make([]raft.Server, 0, len(servers))}
	for _, sv := range servers {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(sv.ID),
			Address:  raft.ServerAddress(sv.Address),
		})
	}
	err := s.awaitWithCtx(ctx, func(time.Duration) raft.Future { return s.raft.BootstrapCluster(conf) })
	if errors.Is(err, raft.ErrCantBootstrap) {
		s.log.Info("bootstrap skipped: raft state exists")
		return nil
	}
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	s.log.Info("bootstrapped cluster", "servers", len(servers))
	return nil
}

// AddVoter adds (or promotes) a voting member; leader only (others get
// *NotLeaderError or ErrNoLeader). It returns once the configuration change
// is committed. Adding a server already present with the same address is a
// no-op.
func (s *Store) AddVoter(ctx context.Context, id, addr string) error {
	err := s.awaitWithCtx(ctx, func(timeout time.Duration) raft.Future {
		return s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
	if err != nil {
		return fmt.Errorf("add voter %s: %w", id, err)
	}
	s.log.Info("added voter", "peer", id, "addr", addr)
	return nil
}

// AddNonvoter adds a server that replicates the log but does not vote;
// leader only. A server already present keeps its suffrage (raft only
// records the address), so it never demotes a voter: use DemoteVoter.
func (s *Store) AddNonvoter(ctx context.Context, id, addr string) error {
	err := s.awaitWithCtx(ctx, func(timeout time.Duration) raft.Future {
		return s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
	if err != nil {
		return fmt.Errorf("add non-voter %s: %w", id, err)
	}
	s.log.Info("added non-voter", "peer", id, "addr", addr)
	return nil
}

// DemoteVoter turns a voter into a non-voter that keeps replicating;
// leader only. Demoting an unknown server or a non-voter is a no-op.
func (s *Store) DemoteVoter(ctx context.Context, id string) error {
	err := s.awaitWithCtx(ctx, func(timeout time.Duration) raft.Future {
		return s.raft.DemoteVoter(raft.ServerID(id), 0, timeout)
	})
	if err != nil {
		return fmt.Errorf("demote voter %s: %w", id, err)
	}
	s.log.Info("demoted voter", "peer", id)
	return nil
}

// RemoveServer removes a member; leader only. Removing the leader itself
// makes it step down once the change commits. Removing an unknown ID is a
// no-op. The removed server's Store keeps running, without a vote and
// without starting elections, until its owner calls Shutdown.
func (s *Store) RemoveServer(ctx context.Context, id string) error {
	err := s.awaitWithCtx(ctx, func(timeout time.Duration) raft.Future {
		return s.raft.RemoveServer(raft.ServerID(id), 0, timeout)
	})
	if err != nil {
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	s.log.Info("removed server", "peer", id)
	return nil
}

// Configuration returns the latest raft configuration this server knows
// (possibly not yet committed), in raft's order.
func (s *Store) Configuration(ctx context.Context) ([]Server, error) {
	var f raft.ConfigurationFuture
	err := s.awaitWithCtx(ctx, func(time.Duration) raft.Future {
		f = s.raft.GetConfiguration()
		return f
	})
	if err != nil {
		return nil, fmt.Errorf("get configuration: %w", err)
	}
	var out []Server
	for _, sv := range f.Configuration().Servers {
		out = append(out, Server{ID: string(sv.ID), Address: string(sv.Address), Voter: sv.Suffrage == raft.Voter})
	}
	return out, nil
}

// HasServer reports whether id is in the latest raft configuration this
// server knows (what Configuration lists), false once the Store is shut
// down. It waits for nothing: raft answers GetConfiguration from memory,
// so this skips Configuration's context, waiting goroutine and copy. It
// runs for every inter-node gRPC call under mTLS (the caller's membership
// check), a forwarded write's included.
func (s *Store) HasServer(id string) bool {
	if s.enter() != nil {
		return false
	}
	defer s.leave()
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, sv := range f.Configuration().Servers {
		if string(sv.ID) == id {
			return true
		}
	}
	return false
}

// LeadershipTransfer asks this server, the leader, to hand leadership to
// the most up-to-date follower and waits for the hand-off. Non-leaders get
// *NotLeaderError or ErrNoLeader.
func (s *Store) LeadershipTransfer(ctx context.Context) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	err := s.awaitWithCtx(ctx, func(time.Duration) raft.Future { return s.raft.LeadershipTransfer() })
	if err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	return nil
}

// Snapshot takes a snapshot now (normally raft does so on its own, see
// SnapshotInterval/SnapshotThreshold) and waits for it to be persisted.
// Returns ErrNothingToSnapshot when nothing has been applied since this
// Store started.
func (s *Store) Snapshot(ctx context.Context) error {
	err := s.awaitWithCtx(ctx, func(time.Duration) raft.Future { return s.raft.Snapshot() })
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}
