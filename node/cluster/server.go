package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ServerDeps are the Server's collaborators.
type ServerDeps struct {
	// Store is the local Raft store (required).
	Store RaftStore
	// Resolver maps node ids to gRPC addresses: it puts the leader's gRPC
	// address into NOT_LEADER answers and lets RemovePeer reach the leader
	// from a follower. Optional (a *Directory).
	Resolver AddrResolver
	// Members lists gossip members for the Members RPC. Optional (the RPC
	// then returns an empty list).
	Members MemberLister
	// Deliverer delivers relayed messages to local recipients (the
	// *router.Router). Optional: nil fails every relayed message with
	// NOT_CONNECTED.
	Deliverer LocalDeliverer
	// Events receives relayed message events (the *fanout.Hub). Optional.
	Events EventSink
	// Keyring is the gossip keyring the Admin service lists and changes
	// (the *membership.Membership). Optional: nil answers the keyring
	// methods with FAILED_PRECONDITION.
	Keyring Keyring
	// Health is the autopilot's report the Operator service serves (the
	// *Reconciler). Optional: nil answers Health from the leader only
	// through a peer that has one.
	Health HealthSource
	// Drainer drains this node for the Operator service. Optional: nil
	// answers a drain of this node with UNIMPLEMENTED.
	Drainer Drainer
	// Admitter decides drain admissions on the leader (the *Reconciler).
	// Optional: nil answers AdmitDrain with UNIMPLEMENTED on the leader.
	Admitter DrainAdmitter
}

// Server is the node's gRPC server with the Cluster and Admin services
// registered.
// Other services (federation) may be registered on GRPC() before Serve.
// Serve runs on a goroutine the caller owns; Shutdown stops it.
type Server struct {
	cfg  Config
	log  *slog.Logger
	deps ServerDeps
	grpc *grpc.Server
	pool *pool // RemovePeer's hop to the leader

	stopping chan struct{} // closed by Shutdown: relay handlers return
	handlers *handlerCount // RPC handlers running (server_stop.go)
	wg       sync.WaitGroup
	stopOnce sync.Once
	mu       sync.Mutex
	shutErr  error
}

// streamWorkers is the number of goroutines serving RPCs (see
// grpc.NumStreamWorkers): about the forwarded writes in flight under a
// busy load (each waits for its commit), at a few KiB of stack each while
// idle.
const streamWorkers = 64

// NewServer builds the gRPC server and registers the Cluster service.
func NewServer(cfg Config, deps ServerDeps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, fmt.Errorf("%w: Server needs a Store", ErrInvalidConfig)
	}
	handlers := &handlerCount{}
	opts := []grpc.ServerOption{
		// Outermost: Shutdown tells RPCs in progress from idle
		// connections (server_stop.go).
		grpc.ChainUnaryInterceptor(handlers.unary),
		grpc.ChainStreamInterceptor(handlers.stream),
		// Credentials and authorization interceptors (mTLS, node/authz)
		// come in through cfg.ServerOptions.
		grpc.MaxRecvMsgSize(cfg.MaxMessageSize),
		grpc.MaxSendMsgSize(cfg.MaxMessageSize),
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
		// Peers ping every KeepaliveTime even without RPCs; the default
		// policy (5 min) would answer those pings with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: cfg.KeepaliveTime / 2, PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		experimental.BufferPool(grpcBuffers), grpc.ForceServerCodecV2(grpcCodec), // bufpool.go
		// Serve streams on long-lived workers instead of a new goroutine
		// per RPC: a forwarded write's handler runs deep (Raft apply, the
		// wait for its commit), and a fresh goroutine regrew that stack on
		// every call (issue 10: 2% of a 3-node cluster's CPU under 64
		// writers). More concurrent RPCs than workers fall back to a
		// goroutine each, as before.
		grpc.NumStreamWorkers(streamWorkers),
	}
	if cfg.HandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(cfg.HandshakeTimeout))
	}
	s := &Server{
		cfg: cfg, log: cfg.logger("cluster.server"), deps: deps,
		grpc:     grpc.NewServer(append(opts, cfg.ServerOptions...)...),
		pool:     newPool(cfg),
		handlers: handlers,
		stopping: make(chan struct{}),
	}
	concordv1.RegisterClusterServer(s.grpc, &service{s: s})
	concordv1.RegisterAdminServer(s.grpc, &adminService{s: s})
	concordv1.RegisterOperatorServer(s.grpc, &operatorService{s: s})
	return s, nil
}

// GRPC returns the underlying server, to register more services before
// Serve.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve accepts connections on lis until Shutdown; it then returns nil.
// It closes lis.
func (s *Server) Serve(lis net.Listener) error {
	err := s.grpc.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops the server: inbound relay streams end after the batch
// they are handling (peers see the stream close and reconnect elsewhere or
// fail their messages), new RPCs are refused, and it waits for the RPCs in
// progress (GracefulStop). When ctx ends first, it stops hard: connections
// are closed and handlers see their contexts cancelled. Once no RPC runs,
// connections still open after connclose.Grace (a frozen peer's) are
// closed too (server_stop.go). It waits for every
// goroutine the Server started. Idempotent; later calls wait for the first.
func (s *Server) Shutdown(ctx context.Context) error {
	// Once.Do makes concurrent callers wait until the first finishes.
	s.stopOnce.Do(func() { s.shutdown(ctx) })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutErr
}

func (s *Server) shutdown(ctx context.Context) {
	close(s.stopping)
	graceful := make(chan struct{})
	go func() { // ends when GracefulStop returns, which Stop forces
		defer close(graceful)
		s.grpc.GracefulStop()
	}()
	var err error
	if !s.awaitGraceful(ctx, graceful) {
		s.grpc.Stop()
		<-graceful
		if ctx.Err() != nil {
			err = fmt.Errorf("cluster server: graceful stop: %w", ctx.Err())
		}
	}
	s.wg.Wait() // relay stream readers end with their streams
	if perr := s.pool.close(); perr != nil {
		err = errors.Join(err, perr)
	}
	s.mu.Lock()
	s.shutErr = err
	s.mu.Unlock()
}
