package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/concordmap/concord/node/acl"
	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
)

// lateMembers is the MemberLister handed to the cluster directory before
// membership exists: membership needs the Raft address in its meta, Raft
// needs the forwarder, and the forwarder needs the directory. Nothing reads
// it before Start, by which time set has been called.
type lateMembers struct {
	m atomic.Pointer[membership.Membership]
}

func (l *lateMembers) set(m *membership.Membership) { l.m.Store(m) }

func (l *lateMembers) Members() []membership.Member {
	if m := l.m.Load(); m != nil {
		return m.Members()
	}
	return nil
}

// clusterConfig is node.Config.Cluster with identity and fault seams filled.
func (s *Server) clusterConfig() cluster.Config {
	cc := s.cfg.Cluster
	cc.NodeID = s.cfg.NodeID
	cc.Logger = s.cfg.Logger
	opts, peerCreds := s.securityOptions()
	cc.ServerOptions = append(append([]grpc.ServerOption(nil), cc.ServerOptions...), opts...)
	cc.PeerCredentials = peerCreds
	if s.cfg.GRPCDialer != nil {
		dial := s.cfg.GRPCDialer
		cc.DialOptions = append(append([]grpc.DialOption(nil), cc.DialOptions...),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, addr) }))
	}
	return cc
}

// buildClusterClients builds the parts Raft and the router need at
// construction: the directory (who is alive, where), the forwarder and the
// peer streams. Their goroutines start lazily or in Start.
func (s *Server) buildClusterClients() error {
	cc := s.clusterConfig()
	dir, err := cluster.NewDirectory(cc, &s.members)
	if err != nil {
		return fmt.Errorf("build cluster directory: %w", err)
	}
	fwd, err := cluster.NewForwarder(cc, dir)
	if err != nil {
		return fmt.Errorf("build forwarder: %w", err)
	}
	peers, err := cluster.NewPeerStreams(cc, dir, dir)
	if err != nil {
		_ = fwd.Close()
		return fmt.Errorf("build peer streams: %w", err)
	}
	s.directory, s.forwarder, s.peers = dir, fwd, peers
	return nil
}

// buildMembership creates (but does not start) gossip membership, now that
// every listener is bound and its address known.
func (s *Server) buildMembership() error {
	mc := s.cfg.Membership
	mc.NodeID, mc.SystemID = s.cfg.NodeID, s.cfg.SystemID
	host, port, err := splitHostPort(s.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("gossip address: %w", err)
	}
	mc.BindAddr, mc.BindPort = host, port
	if s.cfg.GossipAdvertise != "" {
		if mc.AdvertiseAddr, mc.AdvertisePort, err = splitHostPort(s.cfg.GossipAdvertise); err != nil {
			return fmt.Errorf("gossip advertise address: %w", err)
		}
	}
	mc.Meta = membership.NodeMeta{
		HTTPAddr:   s.httpLn.Addr().String(),
		GRPCAddr:   s.grpcAdvertise(),
		RaftAddr:   s.store.Addr(),
		Version:    s.cfg.Version,
		Role:       membership.RoleServer,
		RaftVoters: s.cfg.Cluster.RaftVoters,
		FSMLevel:   s.registry.BuildFSMLevel(),
	}
	mc.GossipKey, mc.AllowPlaintext = s.cfg.GossipKey, s.cfg.GossipPlaintext
	if !s.cfg.GossipPlaintext {
		mc.KeyringFile = filepath.Join(s.cfg.DataDir, KeyringFileName)
	}
	mc.JoinAddrs = s.cfg.Join
	mc.BootstrapExpect = s.cfg.BootstrapExpect
	mc.Logger = s.cfg.Logger
	m, err := membership.New(mc)
	if err != nil {
		return fmt.Errorf("build membership: %w", err)
	}
	s.membership = m
	s.members.set(m)
	return nil
}

// buildClusterServer builds the gRPC Cluster service and the reconciler.
func (s *Server) buildClusterServer() error {
	cc := s.clusterConfig()
	s.memberSub = s.membership.Subscribe()
	rec, err := cluster.NewReconciler(cc, cluster.ReconcilerDeps{
		Store:         verifiedVoters{RaftConfigurator: s.store, s: s},
		Members:       s.membership,
		Sessions:      s.registry,
		MemberChanges: s.memberSub.Changed(),
		Resolver:      s.directory,
		Levels:        s.registry,
		Drains:        s.registry,
	})
	if err != nil {
		return fmt.Errorf("build reconciler: %w", err)
	}
	srv, err := cluster.NewServer(cc, cluster.ServerDeps{
		Store:     s.store,
		Resolver:  s.directory,
		Members:   s.membership,
		Deliverer: countingDeliverer{next: s.router, m: s.metrics.ops.relay},
		Events:    s.hub,
		Keyring:   s.membership,
		Health:    rec,
		Drainer:   s,
		Admitter:  rec,
	})
	if err != nil {
		return fmt.Errorf("build cluster server: %w", err)
	}
	srv.ServeSnapshots(s.store, raftstore.SaveOptions{SystemID: s.cfg.SystemID, Version: s.cfg.Version})
	// Every AclAdmin method is an admin method (see acl.AdminMethodPrefix).
	s.aclAdmin = acl.NewAdminService(s.acl, meteredProposer{store: s.store, m: s.metrics}, s.store.WaitApplied)
	s.aclAdmin.Register(srv.GRPC())
	s.metrics.reg.MustRegister(newAutopilotCollector(s.cfg.NodeID, s.store.IsLeader, rec.Health))
	s.cluster, s.reconciler = srv, rec
	return nil
}

// grpcAdvertise is the gRPC address peers dial.
func (s *Server) grpcAdvertise() string {
	if s.cfg.GRPCAdvertise != "" {
		return s.cfg.GRPCAdvertise
	}
	return s.grpcLn.Addr().String()
}

// bootstrap forms the Raft cluster on first start: alone with Bootstrap, or
// with BootstrapExpect once that many servers see each other. Every node
// computes the same server list from gossip, so the order they start in
// does not matter, and raft ignores a bootstrap on a node with state.
func (s *Server) bootstrap(ctx context.Context) error {
	servers, err := s.store.Configuration(ctx)
	if err == nil && len(servers) > 0 {
		s.advertiseBootstrapped(ctx) // existing cluster: never bootstrap again
		return nil
	}
	switch {
	case s.cfg.Bootstrap:
		if err := s.store.BootstrapSelf(ctx); err != nil {
			return fmt.Errorf("bootstrap raft: %w", err)
		}
	case s.cfg.BootstrapExpect > 0:
		members, err := s.membership.WaitBootstrapExpect(ctx)
		if errors.Is(err, membership.ErrAlreadyBootstrapped) {
			return nil // another server formed the cluster; the leader adds us
		}
		if err != nil {
			return fmt.Errorf("wait for %d servers: %w", s.cfg.BootstrapExpect, err)
		}
		list := make([]raftstore.Server, 0, len(members))
		for _, m := range members {
			list = append(list, raftstore.Server{ID: m.ID, Address: m.RaftAddr})
		}
		// Only the first RaftVoters servers (by id, the same on every
		// node) form the cluster; the others wait, like a joining server,
		// for the leader to add them as non-voters.
		if n := s.cfg.Cluster.RaftVoters; n > 0 && len(list) > n {
			list = list[:n]
			if !slices.ContainsFunc(list, func(sv raftstore.Server) bool { return sv.ID == s.cfg.NodeID }) {
				return nil
			}
		}
		if err := s.store.BootstrapCluster(ctx, list); err != nil {
			return fmt.Errorf("bootstrap raft with %d servers: %w", len(list), err)
		}
	default:
		return nil // joining an existing cluster: the leader's reconciler adds us
	}
	s.advertiseBootstrapped(ctx)
	return nil
}

// advertiseBootstrapped tells gossip that this node has Raft state. Waiting
// for the broadcast can time out while peers are down (a restart during an
// outage); the flag is already in the local meta and spreads with the next
// gossip rounds, so that is a warning, not a failed start.
func (s *Server) advertiseBootstrapped(ctx context.Context) {
	if err := s.membership.SetBootstrapped(ctx); err != nil {
		s.log.Warn("bootstrapped flag not yet acknowledged by gossip; it spreads with the next rounds", "err", err)
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

// ACLAdmin returns the access-control admin API (also served over gRPC as
// concord.v1.AclAdmin), for embedding and tests.
func (s *Server) ACLAdmin() *acl.AdminService { return s.aclAdmin }
