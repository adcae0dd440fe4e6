package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/acl"
	"github.com/concordmap/concord/node/authz"
	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/fanout"
	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/runs"
	"github.com/concordmap/concord/node/tlsconf"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// Server is one running Concord node. Build it with New, then Start; stop it
// with Shutdown. All methods are safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	registry *registry.State
	runs     *runs.Module
	acl      *acl.Module // API keys (replicated)
	aclAdmin *acl.AdminService
	auth     *acl.Authenticator
	runsSvc  *runs.Service
	fedState *federation.State
	fed      *federation.Manager
	fedHook  *lateFederation
	store    *raftstore.Store
	metrics  *metrics
	fsmApply *fsmApplyTimer // the FSM's apply-time histogram (metrics_fsm.go)
	hub      *fanout.Hub
	router   *router.Router
	svc      *mapsvc.Service
	rpc      *rpc.Server

	// Cluster parts (node/cluster, node/membership).
	members lateMembers
	// fsmLevelCache is fsmLevel's last answer (fsmlevel.go).
	fsmLevelCache atomic.Pointer[fsmLevelSample]
	membership    *membership.Membership
	memberSub     *membership.Subscription
	directory     *cluster.Directory
	forwarder     *cluster.Forwarder
	peers         *cluster.PeerStreams
	cluster       *cluster.Server
	reconciler    *cluster.Reconciler

	// Security (security.go): tls is nil without TLS.
	tls       *tlsconf.Manager
	authz     *authz.Authorizer
	raftStore lateStore
	raftLayer *tlsconf.RaftLayer // set while the raft store is built

	httpLn  net.Listener
	grpcLn  net.Listener
	httpSrv *http.Server

	// caughtUp turns true once Start has seen the node apply everything
	// committed before it started; until then the MAP endpoint refuses
	// connections, so a restarting node never answers from stale state
	// (a resume of a session it has not replayed yet would open a new one).
	caughtUp atomic.Bool
	// removed caches a leader's answer on whether this node is still in
	// the Raft configuration (outOfConfiguration).
	removed removedCheck

	// Drain (drain.go): draining is set once; drained closes when the node
	// has left. loopMu orders goLoop against Shutdown (stopping), so a
	// drain started during a shutdown adds no loop Shutdown misses.
	draining atomic.Bool
	drained  chan struct{}
	// fatal closes when the node cannot go on (its FSM halted: halt.go);
	// fatalErr says why and is set before.
	fatal     chan struct{}
	fatalErr  error
	fatalOnce sync.Once

	loopMu   sync.Mutex
	stopping bool
	runCtx   context.Context

	// cancel stops the background loops started by Start; wg waits for them.
	cancel context.CancelFunc
	wg     sync.WaitGroup

	startOnce    sync.Once
	shutdownOnce sync.Once
	shutdownErr  error
}

// New validates cfg, opens the Raft store (without bootstrapping) and builds
// every component. Nothing listens for clients until Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "node", "node_id", cfg.NodeID), drained: make(chan struct{}), fatal: make(chan struct{})}

	if err := s.build(); err != nil {
		s.closeBuilt()
		return nil, err
	}
	return s, nil
}

// build constructs every component without starting any. Listeners are
// bound here so their (possibly OS-chosen) addresses can be advertised.
func (s *Server) build() error {
	reg, err := registry.New(s.cfg.Registry)
	if err != nil {
		return fmt.Errorf("build registry: %w", err)
	}
	s.registry = reg
	s.fedState = federation.NewState()
	s.fedHook = &lateFederation{systemID: s.cfg.SystemID}
	if err := s.buildSecurity(); err != nil {
		return err
	}
	rcfg := s.cfg.Runs
	rcfg.Events = reg // run events join the replicated event window
	rcfg.Logger = s.cfg.Logger
	if s.runs, err = runs.New(rcfg); err != nil {
		return fmt.Errorf("build runs module: %w", err)
	}
	if s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen http %s: %w", s.cfg.HTTPAddr, err)
	}
	s.httpLn = s.wrapHTTPListener(s.httpLn)
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen grpc %s: %w", s.cfg.GRPCAddr, err)
	}
	if err := s.buildClusterClients(); err != nil {
		return err
	}
	if err := s.openStore(); err != nil {
		return err
	}
	s.forwarder.SetLeaderSource(s.store)
	s.metrics = newMetrics(s.cfg.NodeID, s.store)
	s.metrics.reg.MustRegister(s.fsmApply.vec)
	if err := s.buildMembership(); err != nil {
		return err
	}
	if err := s.buildMAPService(); err != nil {
		return err
	}
	if err := s.buildClusterServer(); err != nil {
		return err
	}
	return s.buildFederation()
}

// closeBuilt releases what build acquired when it failed part way.
func (s *Server) closeBuilt() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if s.memberSub != nil {
		s.memberSub.Close()
	}
	if s.membership != nil {
		_ = s.membership.Shutdown()
	}
	if s.store != nil {
		_ = s.store.Shutdown(ctx)
	}
	if s.peers != nil {
		_ = s.peers.Close()
	}
	if s.forwarder != nil {
		_ = s.forwarder.Close()
	}
	for _, ln := range []net.Listener{s.httpLn, s.grpcLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

func (s *Server) openStore() error {
	rc := s.cfg.Raft
	rc.NodeID = s.cfg.NodeID
	rc.DataDir = s.cfg.DataDir
	rc.BindAddr = s.cfg.RaftAddr
	rc.AdvertiseAddr = s.cfg.RaftAdvertise
	s.acl = acl.NewModule().WithEvents(s.registry) // permissions_client_updated joins the event window
	rc.Modules = []raftstore.Module{s.registry, s.runs, fedModule{s.fedState}, s.acl}
	rc.Logger = s.cfg.Logger
	rc.Forwarder = s.forwarder
	rc.WrapStreamLayer = s.raftStreamWrapper()
	s.fsmApply = newFSMApplyTimer()
	rc.ObserveApply = s.fsmApply.observe
	store, err := raftstore.New(rc)
	if err != nil {
		return fmt.Errorf("open raft store: %w", err)
	}
	s.store = store
	s.raftStore.p.Store(store)
	return nil
}

// eventVisible is the fan-out's visibility rule (node/access), decided on
// this node's replica.
func (s *Server) eventVisible(sessionID, participantID, participantType string, ev *registry.Event) bool {
	return access.EventVisible(s.registry, access.Viewer{ParticipantID: participantID, ParticipantType: participantType,
		Agents: s.registry.SessionAgentIDs(sessionID), Client: s.acl.Visibility(participantID)}, ev)
}

// buildMAPService wires the MAP method handlers, the router and the
// subscription hub. The session table is created first because the router
// and the hub look connections up in it, and the service fills it.
func (s *Server) buildMAPService() error {
	s.metrics.addOps(s.cfg.NodeID, s.store, s.registry, s.runs)
	proposer := meteredProposer{store: s.store, m: s.metrics}
	sessions := mapsvc.NewSessions()
	fcfg := fanout.DefaultConfig()
	fcfg.NodeID = s.cfg.NodeID
	fcfg.Registry = s.registry
	fcfg.WaitApplyBatch = s.store.WaitApplyBatch
	fcfg.Sessions = sessions
	fcfg.Proposer = proposer
	fcfg.AfterReply = rpc.AfterReply // first events follow the subscribe reply
	fcfg.Visible = s.eventVisible
	fcfg.FSMLevel = s.fsmLevel
	fcfg.Logger = s.cfg.Logger
	hub, err := fanout.New(fcfg)
	if err != nil {
		return fmt.Errorf("build fanout: %w", err)
	}
	rcfg := router.DefaultConfig()
	rcfg.NodeID = s.cfg.NodeID
	rcfg.Registry = s.registry
	rcfg.Sessions = sessions
	rcfg.Events = cluster.NewEventBroadcaster(hub, s.peers, s.registry)
	rcfg.Peers = s.peers
	if s.peers != nil {
		rcfg.Peers = countingPeers{next: s.peers, out: s.metrics.ops.relay.out}
	}
	rcfg.Federation = s.fedHook
	rcfg.Permissions = sendPermissions{reg: s.registry, systemID: s.cfg.SystemID}
	rcfg.Logger = s.cfg.Logger
	rt, err := router.New(rcfg)
	if err != nil {
		return fmt.Errorf("build router: %w", err)
	}
	scfg := s.cfg.RunService
	scfg.NodeID = s.cfg.NodeID
	scfg.Module = s.runs
	scfg.Store = proposer
	scfg.Agents = s.registry
	scfg.SystemID = s.cfg.SystemID
	scfg.Remote = s.fedState
	scfg.Messenger = rt
	scfg.Leadership = s.store
	scfg.IsLeader = s.store.IsLeader
	scfg.WaitApplied = s.store.WaitApplied
	scfg.Logger = s.cfg.Logger
	runsSvc, err := runs.NewService(scfg)
	if err != nil {
		return fmt.Errorf("build runs service: %w", err)
	}
	s.runsSvc = runsSvc
	if err := rt.RegisterService(runs.ServiceID, runsSvc); err != nil {
		return fmt.Errorf("register runs service: %w", err)
	}

	mcfg := s.cfg.MAP
	mcfg.ExtensionMethods = runsSvc.Methods()
	mcfg.Extensions = append(mcfg.Extensions, mapsvc.Extension{URI: runs.ExtensionURI, Version: runs.ExtensionVersion})
	mcfg.NodeID = s.cfg.NodeID
	mcfg.SystemID = s.cfg.SystemID
	mcfg.RemoteAgents = s.remoteAgents
	mcfg.System = mapsvc.SystemInfo{Name: "concord", Version: s.cfg.Version}
	mcfg.Store = proposer
	mcfg.Registry = s.registry
	mcfg.Sessions = sessions
	mcfg.IsLeader = s.store.IsLeader
	mcfg.WaitApplied = s.store.WaitApplied
	mcfg.WaitFence = s.store.WaitAppliedSoon
	mcfg.WaitApplyBatch = s.store.WaitApplyBatch
	mcfg.AppliedIndex = s.store.AppliedIndex
	mcfg.LinearizableRead = s.store.LinearizableRead
	mcfg.Barrier = s.readyBarrier
	mcfg.FSMLevel = s.fsmLevel
	mcfg.Router = rt
	mcfg.Fanout = hub
	mcfg.Gateway = fedGateway{hook: s.fedHook, timeout: func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), s.cfg.Federation.CallTimeout+s.cfg.Federation.AckTimeout)
	}}
	acfg := s.cfg.ACL
	acfg.Keys = s.acl
	if acfg.Logger == nil {
		acfg.Logger = s.cfg.Logger
	}
	auth, err := acl.New(acfg)
	if err != nil {
		return fmt.Errorf("build authenticator: %w", err)
	}
	s.auth = auth
	mcfg.Authenticator = auth
	mcfg.ParticipantPermissions = s.acl
	// Dead nodes' sessions are detached by the cluster reconciler, which
	// waits out the cleanup delay for unknown nodes and the session detach
	// grace for failed ones; mapsvc's own sweep (NodeAlive) stays off
	// because a new leader's cold directory would detach live sessions.
	// Sessions connected here in the registry with no connection (a
	// restored snapshot, a restart gossip did not notice) wait the same
	// grace before this node detaches them.
	mcfg.OrphanGrace = s.cfg.Cluster.SessionDetachGrace
	mcfg.Logger = s.cfg.Logger
	svc, err := mapsvc.New(mcfg)
	if err != nil {
		return fmt.Errorf("build map service: %w", err)
	}
	pcfg := s.cfg.RPC
	pcfg.Logger = s.cfg.Logger
	pcfg.Observer = s.metrics
	rs, err := rpc.NewServer(pcfg, svc)
	if err != nil {
		return fmt.Errorf("build rpc server: %w", err)
	}
	s.hub, s.router, s.svc, s.rpc = hub, rt, svc, rs
	return nil
}

// Start listens for HTTP, bootstraps Raft when configured, waits until the
// node is ready (a leader is known and the log is applied) and starts the
// background loops. It returns an error if the node is not ready within
// Config.ReadyTimeout, and at once (matching membership.ErrGossipKey) when
// the gossip seeds refuse this node's key. ctx also bounds gossip's
// background join loop, which may go on after Start returns.
func (s *Server) Start(ctx context.Context) error {
	err := errors.New("node: already started")
	s.startOnce.Do(func() { err = s.startWatched(ctx) })
	return err
}

// joinCtx bounds gossip's background join loop (the caller's context, which
// may outlive start); ctx bounds start's own waits.
func (s *Server) start(joinCtx, ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel, s.runCtx = cancel, runCtx
	// The directory subscribes before gossip starts so it misses no change,
	// and runs before bootstrap so forwarding can find the leader at once.
	dirSub := s.membership.Subscribe()
	if err := s.membership.Start(joinCtx); err != nil {
		dirSub.Close()
		return fmt.Errorf("start membership: %w", err)
	}
	s.directory.Refresh()
	s.goLoop("directory", func() error { defer dirSub.Close(); return s.directory.Run(runCtx, dirSub.Changed()) })
	s.goLoop("grpc", func() error { return s.cluster.Serve(s.grpcLn) })
	if err := s.bootstrap(ctx); err != nil {
		return err
	}
	s.goLoop("fsm-halt", func() error { return s.watchHalt(runCtx) })
	s.goLoop("reconciler", func() error { return s.reconciler.Run(runCtx) })
	s.goLoop("fanout", func() error { return s.hub.Run(runCtx) })
	s.goLoop("mapsvc", func() error { return s.svc.Run(runCtx) })
	s.goLoop("jwks", func() error { return s.auth.Run(runCtx) })
	s.goLoop("runs", func() error { return s.runsSvc.Run(runCtx) })
	s.goLoop("federation", func() error { return s.fed.Run(runCtx) })
	s.goLoop("insecure-warning", func() error { return s.repeatInsecureWarning(runCtx) })

	s.httpSrv = &http.Server{
		Handler:           s.authz.HTTP(s.httpClass, s.httpHandler()),
		ReadHeaderTimeout: s.cfg.HTTPReadHeaderTimeout,
		IdleTimeout:       s.cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.goLoop("http", func() error {
		if err := s.httpSrv.Serve(s.httpLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	s.caughtUp.Store(true)
	s.log.Info("node ready", "http", s.HTTPAddr(), "grpc", s.grpcAdvertise(), "raft", s.store.Addr(),
		"gossip", s.membership.LocalMember().GossipAddr)
	return nil
}

// goLoop runs fn in a goroutine owned by the server: Shutdown cancels its
// context and waits for it to return.
func (s *Server) goLoop(name string, fn func() error) {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	s.goLoopLocked(name, fn)
}

// goLoopLocked is goLoop with loopMu held; it starts nothing once
// Shutdown began.
func (s *Server) goLoopLocked(name string, fn func() error) {
	if s.stopping {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("background loop stopped", "loop", name, "err", err)
		}
	}()
}

// waitReady waits until the node can serve consistent reads of everything
// committed before it started: on the leader a ReadIndex barrier (which
// also applies the log replayed after a restart); on a follower a NOOP
// committed through the leader and applied here. A follower's own view is
// not enough: raft's heartbeats name the leader without carrying its commit
// index, so a restarted follower looks caught up (applied = commit = what
// its snapshot held) before it has replayed anything.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := s.checkRaftVoters(); err != nil {
			return err
		}
		if err := s.store.HaltErr(); err != nil {
			return fmt.Errorf("node halted: %w", err)
		}
		reason := s.notReadyReason()
		if reason == "" {
			err := s.readyBarrier(ctx)
			if err == nil {
				return nil
			}
			reason = "ready barrier: " + err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not ready: %s: %w", reason, ctx.Err())
		case <-tick.C:
		}
	}
}

// readyBarrier returns once this node's FSM has applied an index the
// leader committed after this call began.
func (s *Server) readyBarrier(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s.store.IsLeader() {
		return s.store.LinearizableRead(bctx)
	}
	_, _, err := s.store.Apply(bctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "ready barrier: " + s.cfg.NodeID})
	return err
}

// notReadyReason returns "" when the node has caught up, else why not: it
// must know a leader, a follower must have heard from it, and the FSM must
// have applied everything known to be committed. Start waits for this
// strict form once; afterwards readyReason tolerates the normal lag of a
// busy node.
func (s *Server) notReadyReason() string { return s.raftReason(0, 0) }

// maxReadyApplyLag is how many committed entries a caught-up node may have
// left to apply and still answer ready: on a busy node applied trails commit
// by a batch or two at any instant, which is not a reason to pull it out of
// a load balancer.
const maxReadyApplyLag = 1024

// readyReason is the readiness probe's view: "" when the node serves, else
// why not. Before Start has seen the node catch up it is notReadyReason;
// afterwards the node stays ready while it knows a leader, a follower has
// heard from it within a few heartbeat timeouts (one slow heartbeat must
// not flap readiness), and the apply lag is small.
func (s *Server) readyReason() string {
	if err := s.store.HaltErr(); err != nil {
		return "halted: " + err.Error()
	}
	if s.draining.Load() {
		return "draining: this node takes no new sessions (concord operator drain); connect to another node"
	}
	if err := s.store.DiskFull(); err != nil {
		// Named first: "no raft leader" would hide the cause.
		return fmt.Sprintf("disk full: data dir %s: %v", s.cfg.DataDir, err)
	}
	if !s.caughtUp.Load() {
		if reason := s.notReadyReason(); reason != "" {
			return "catching up: " + reason
		}
		return "starting"
	}
	return s.raftReason(4*s.cfg.Raft.HeartbeatTimeout, maxReadyApplyLag)
}

// raftReason returns "" when this node knows a leader, a follower has heard
// from it (within maxSilence; 0: ever) and the FSM trails the commit index
// by at most maxLag entries; else why not.
func (s *Server) raftReason(maxSilence time.Duration, maxLag uint64) string {
	if id, _ := s.store.Leader(); id == "" {
		if s.outOfConfiguration() {
			return notConfiguredReason
		}
		return "no raft leader"
	}
	stats := s.store.Stats()
	if last := stats["last_contact"]; !s.store.IsLeader() {
		switch contact, err := time.ParseDuration(last); {
		case last == "never":
			return "no contact with the leader yet"
		case maxSilence > 0 && (err != nil || contact > maxSilence):
			return "no recent contact with the leader (last " + last + ")"
		}
	}
	applied, _ := strconv.ParseUint(stats["applied_index"], 10, 64)
	commit, _ := strconv.ParseUint(stats["commit_index"], 10, 64)
	if commit > applied+maxLag {
		return fmt.Sprintf("applying log (%d of %d)", applied, commit)
	}
	return ""
}

// HTTPAddr returns the bound HTTP address (host:port), "" before Start.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// MAPURL returns the WebSocket URL of the MAP endpoint (wss:// with TLS).
func (s *Server) MAPURL() string {
	if s.httpTLS() {
		return "wss://" + s.HTTPAddr() + "/map"
	}
	return "ws://" + s.HTTPAddr() + "/map"
}

// GRPCAddr returns the bound gRPC address (host:port).
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// GossipAddr returns the gossip address peers use (host:port), "" before
// Start.
func (s *Server) GossipAddr() string { return s.membership.LocalMember().GossipAddr }

// HTTPURL returns the base URL of the HTTP API (https:// with TLS).
func (s *Server) HTTPURL() string {
	if s.httpTLS() {
		return "https://" + s.HTTPAddr()
	}
	return "http://" + s.HTTPAddr()
}

// Store exposes the Raft store for operators' tooling and tests.
func (s *Server) Store() *raftstore.Store { return s.store }

// Registry exposes the replicated registry state (read-only use).
func (s *Server) Registry() registry.Reader { return s.registry }

// Shutdown stops the node in reverse start order. It is idempotent; later
// calls return the first call's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
		defer cancel()
	}
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	// 1. Stop accepting clients. MAP connections are hijacked WebSockets that
	// http.Server.Shutdown does not track, so the rpc server closes them. It
	// runs while Raft and the forwarder still work, because closing a
	// connection proposes the session's detach.
	if s.httpSrv != nil {
		// Requests still running after httpDrainTimeout (a response written
		// to a client that stopped reading has no deadline) are cut, so the
		// steps below keep their share of ctx (httpstop.go).
		cut, err := shutdownHTTP(ctx, s.httpSrv, httpDrainTimeout)
		add("shutdown http", err)
		if cut {
			s.log.Info("http requests still running at shutdown were cut", "after", httpDrainTimeout)
		}
	} else {
		_ = s.httpLn.Close()
	}
	add("shutdown rpc", s.rpc.Shutdown(ctx))
	// 2. Hand leadership to a peer first, so the cluster does not wait an
	// election timeout for us (best effort: alone, or no peer caught up).
	if s.store.IsLeader() {
		if err := s.store.LeadershipTransfer(ctx); err != nil {
			s.log.Debug("leadership transfer skipped", "err", err)
		}
	}
	// 3. End inbound federation streams (peer systems move to another
	// server), stop the gRPC service (peers' forwards and relays now fail
	// over), then the loops that read the store, then the outbound clients.
	s.fed.Close()
	add("shutdown cluster grpc", s.cluster.Shutdown(ctx))
	s.loopMu.Lock()
	s.stopping = true
	s.loopMu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	add("close peer streams", s.peers.Close())
	add("close forwarder", s.forwarder.Close())
	// 4. Raft closes its transport and the bolt stores; gossip goes last so
	// peers see us alive until Raft is down.
	add("shutdown raft store", s.store.Shutdown(ctx))
	s.memberSub.Close()
	add("shutdown membership", s.membership.Shutdown())
	s.log.Info("node stopped")
	return errors.Join(errs...)
}

// Leave leaves the cluster gracefully: peers see the node as left (and the
// leader removes it from the Raft configuration at once), then it shuts
// down. Use it to retire a server; a plain Shutdown is a restart.
func (s *Server) Leave(ctx context.Context) error {
	if err := s.membership.Leave(ctx); err != nil {
		return fmt.Errorf("leave gossip: %w", err)
	}
	return s.Shutdown(ctx)
}
