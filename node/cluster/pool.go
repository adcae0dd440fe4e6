package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/concordmap/concord/federation/connclose"
)

// pool keeps one gRPC client connection per peer node. A connection is
// created lazily (grpc.NewClient does not dial until used) and replaced
// when the peer's advertised address changes. HTTP/2 multiplexes every
// RPC and stream to a peer over it.
type pool struct {
	opts []grpc.DialOption
	// creds returns the transport credentials for dialing a node: mutual
	// TLS verifying that the peer is that node (Config.PeerCredentials).
	creds func(nodeID string) credentials.TransportCredentials

	mu     sync.Mutex
	conns  map[string]*peerConn // by node id
	closed bool
}

type peerConn struct {
	addr  string
	cc    *grpc.ClientConn
	creds *connclose.Credentials // this connection's, to cut its sockets
}

// close closes the connection promptly even when the peer stopped reading:
// gRPC's Close waits up to 5 s for a GOAWAY such a peer never takes (and
// TLS's close_notify as long again), so past connclose.Grace its sockets
// are cut.
func (pc *peerConn) close() error {
	return connclose.CloseWithin(pc.cc.Close, connclose.Grace, pc.creds.Abort)
}

func newPool(cfg Config) *pool {
	opts := []grpc.DialOption{
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout, PermitWithoutStream: true,
		}),
		// grpc's default reconnect backoff starts at 1 s and grows to 120 s:
		// far too slow to notice a restarted peer on a LAN.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay: cfg.RelayReconnectBackoff, Multiplier: 1.6, Jitter: 0.2,
				MaxDelay: cfg.RelayReconnectMaxBackoff,
			},
			MinConnectTimeout: cfg.DialTimeout,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(cfg.MaxMessageSize),
			grpc.MaxCallSendMsgSize(cfg.MaxMessageSize),
			grpc.ForceCodecV2(grpcCodec), // bufpool.go
		),
		experimental.WithBufferPool(grpcBuffers),
	}
	creds := cfg.PeerCredentials
	if creds == nil { // plaintext: only with --insecure or --dev (Config.PeerCredentials)
		creds = func(string) credentials.TransportCredentials { return insecure.NewCredentials() }
	}
	return &pool{opts: append(opts, cfg.DialOptions...), creds: creds, conns: make(map[string]*peerConn)}
}

// get returns the connection to nodeID at addr, creating it (or replacing
// one to an older address) as needed.
func (p *pool) get(nodeID, addr string) (*grpc.ClientConn, error) {
	var stale *peerConn
	// The connection to the peer's old address closes after the lock is
	// released: every caller of get waits on it.
	defer func() {
		if stale != nil {
			_ = stale.close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if pc, ok := p.conns[nodeID]; ok {
		if pc.addr == addr {
			return pc.cc, nil
		}
		// The peer moved (restart on a new port): streams on the old
		// connection fail and their owners reconnect through here.
		stale = pc
		delete(p.conns, nodeID)
	}
	creds := connclose.NewCredentials(p.creds(nodeID))
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, p.opts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s at %s: %w", nodeID, addr, err)
	}
	p.conns[nodeID] = &peerConn{addr: addr, cc: cc, creds: creds}
	return cc, nil
}

// close closes every connection, at once (each within connclose.Grace
// of a stalled peer); get fails afterwards.
func (p *pool) close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*peerConn{}
	p.mu.Unlock()
	errs := make(chan error, len(conns))
	for id, pc := range conns {
		go func() { // waited for below
			if err := pc.close(); err != nil {
				errs <- fmt.Errorf("close connection to %s: %w", id, err)
				return
			}
			errs <- nil
		}()
	}
	var all []error
	for range conns {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// waitReady waits up to d (and ctx) for cc to be connected, starting the
// connection if it is idle. false means it is not: an RPC issued now would
// not reach the peer, so nothing was sent.
func waitReady(ctx context.Context, cc *grpc.ClientConn, d time.Duration) bool {
	if cc.GetState() == connectivity.Ready {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.Shutdown:
			return false
		case connectivity.TransientFailure:
			// The last connect failed (a dead or cut-off peer): say so now
			// instead of waiting out d, so the forwarder re-reads who leads
			// (a new leader is usually known within an election timeout)
			// and the relay fails over or backs off. The channel keeps
			// reconnecting with the short backoff configured above.
			return false
		case connectivity.Idle:
			cc.Connect() // a channel may fall back to idle after a failure
		}
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
	}
}
