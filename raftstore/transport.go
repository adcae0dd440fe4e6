package raftstore

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// newTransport builds raft's network transport over cfg.StreamLayer, or
// over real TCP on cfg.BindAddr when none is injected, under
// cfg.WrapStreamLayer (TLS) when set. Either way the layer is wrapped so
// that closing it also closes accepted connections (see trackingLayer).
// Closing stop ends any pause in pacing replication to a non-voter.
func newTransport(cfg Config, logger *hclogAdapter, stop <-chan struct{}) (*raftTransport, *trackingLayer, error) {
	dials := newDialSet()
	var inner raft.StreamLayer = cfg.StreamLayer
	if inner == nil {
		tcp, err := newTCPStreamLayer(cfg.BindAddr, cfg.AdvertiseAddr)
		if err != nil {
			return nil, nil, err
		}
		tcp.dials = dials // raw sockets too, so a cut ends a TLS handshake
		inner = tcp
	}
	if cfg.WrapStreamLayer != nil {
		inner = cfg.WrapStreamLayer(inner)
	}
	layer := newTrackingLayer(inner, dials)
	// raft's transport dials; rpcServer serves what the layer accepts.
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  newDialOnlyLayer(layer),
		MaxPool: cfg.MaxPool,
		Timeout: cfg.TransportTimeout,
		Logger:  logger,
		// Above 1 raft pipelines AppendEntries to a follower that is
		// caught up; raftTransport makes that safe (pipeline.go).
		MaxRPCsInFlight: cfg.MaxRPCsInFlight,
	})
	pace := &pacer{interval: cfg.NonvoterReplicationInterval, background: cfg.NonvoterBackgroundInterval, maxBatch: cfg.MaxApplyBatch, stop: stop}
	// The new time format stays off, as in raft's transport above: old
	// servers decode entries written either way, but the bytes must be
	// the ones raft writes.
	sender := newAppendSender(layer, cfg.TransportTimeout, cfg.MaxPool, newEntryCache(false))
	server := newRPCServer(layer, logger)
	server.start()
	return &raftTransport{NetworkTransport: trans, pace: pace, sender: sender, server: server}, layer, nil
}

// raftTransport is raft's NetworkTransport whose append pipelines
// cannot deadlock (safePipeline), whose AppendEntries carrying entries
// encode each entry once for all followers (appendSender), whose
// AppendEntries to non-voters are paced (pace.go) and whose incoming RPCs
// are served by rpcServer (rpcserve.go). Every other method is the
// embedded transport's, so raft still sees WithClose and WithPreVote.
type raftTransport struct {
	*raft.NetworkTransport
	pace   *pacer
	sender *appendSender
	server *rpcServer
	// early, when set, sees raft's appends to followers and may answer
	// one in the follower's stead (earlyAppender). Set before raft runs.
	early *earlyAppender
}

// AppendEntries implements raft.Transport. Heartbeats and commit-index
// updates (no entries) go through raft's transport as they are.
func (t *raftTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.early == nil || len(args.Entries) == 0 {
		return t.appendEntries(id, target, args, resp)
	}
	if t.early.answer(id, args, resp) {
		return nil
	}
	t.early.raftSending(id, true)
	err := t.appendEntries(id, target, args, resp)
	t.early.raftSending(id, false)
	if err == nil {
		t.early.appended(id, args.Term, args.Entries[len(args.Entries)-1].Index, resp.Success)
	}
	return err
}

// appendEntries sends one AppendEntries.
func (t *raftTransport) appendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if len(args.Entries) == 0 {
		// A commit-index update (or a heartbeat) may deliver what a
		// client of a paced non-voter waits for.
		err := t.NetworkTransport.AppendEntries(id, target, args, resp)
		if err == nil && !isHeartbeat(args) {
			t.pace.delivered(id, args, resp)
		}
		return err
	}
	start := time.Now()
	err := t.sender.send(target, args, resp)
	if errors.Is(err, errNoSplice) {
		err = t.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	if err != nil {
		return err
	}
	t.pace.delivered(id, args, resp)
	t.pace.hold(id, start, len(args.Entries), resp)
	return nil
}

// Consumer implements raft.Transport: the RPCs rpcServer received.
func (t *raftTransport) Consumer() <-chan raft.RPC { return t.server.consume }

// SetHeartbeatHandler implements raft.Transport: rpcServer answers
// heartbeats with cb, without waiting for raft's main loop.
func (t *raftTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.server.heartbeat.Store(nil)
		return
	}
	t.server.heartbeat.Store(&cb)
}

// Close implements raft.WithClose: it closes the sender's connections
// too, so an append in flight fails instead of waiting for its deadline,
// and the server's (through the layer, which raft's transport closes).
func (t *raftTransport) Close() error {
	t.server.close()
	t.sender.closeConns(true)
	return t.NetworkTransport.Close()
}

// CloseStreams closes the pooled connections of both raft's transport and
// the sender, and ends the connections the server has accepted so far
// before their next request, as raft's CloseStreams does.
func (t *raftTransport) CloseStreams() {
	t.sender.closeConns(false)
	t.server.closeStreams()
	t.NetworkTransport.CloseStreams()
}

// AppendEntriesPipeline implements raft.Transport.
func (t *raftTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newSafePipeline(p), nil
}

// tcpStreamLayer is the production raft.StreamLayer: a TCP listener plus a
// dialer, advertising an address that may differ from the bound one (NAT,
// wildcard binds).
type tcpStreamLayer struct {
	net.Listener
	advertise net.Addr
	dials     *dialSet // when set, tracks the sockets dialled (dialcut.go)
}

func newTCPStreamLayer(bind, advertise string) (*tcpStreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", bind, err)
	}
	var adv net.Addr = ln.Addr()
	if advertise != "" {
		if adv, err = net.ResolveTCPAddr("tcp", advertise); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("resolve advertise address %s: %w", advertise, err)
		}
	}
	if tcp, ok := adv.(*net.TCPAddr); ok && (tcp.IP == nil || tcp.IP.IsUnspecified()) {
		_ = ln.Close()
		return nil, fmt.Errorf("advertise address %s is not routable: set AdvertiseAddr", adv)
	}
	return &tcpStreamLayer{Listener: ln, advertise: adv}, nil
}

// Addr is the advertised address: raft puts it in its configuration, so it
// is what peers dial.
func (t *tcpStreamLayer) Addr() net.Addr { return t.advertise }

// Dial implements raft.StreamLayer.
func (t *tcpStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if t.dials == nil {
		return d.Dial("tcp", string(address))
	}
	c, err := d.DialContext(t.dials.ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	return t.dials.track(c)
}

// trackingLayer remembers dialled connections so Shutdown can cut them
// (dialcut.go), and accepted connections so Close can close them and
// Shutdown can wait for their handlers (rpcServer's, and its accept loop,
// count in live). Each accepted connection has a goroutine reading it
// until the remote end hangs up, and that goroutine answers heartbeats
// itself (raft's fast path), writing the term to the stable store. It
// would outlive Shutdown while peers keep pooled connections open, and
// could write to the bolt file after Shutdown closed it.
type trackingLayer struct {
	raft.StreamLayer
	dials *dialSet // the connections dialled through the layer (dialcut.go)

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{} // open accepted connections; guarded by mu
	live   sync.WaitGroup            // accepted connections not yet closed by their handler
}

func newTrackingLayer(inner raft.StreamLayer, dials *dialSet) *trackingLayer {
	return &trackingLayer{StreamLayer: inner, dials: dials, conns: make(map[*trackedConn]struct{})}
}

// Accept implements net.Listener.
func (l *trackingLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, layer: l}
	l.conns[tc] = struct{}{}
	l.live.Add(1)
	return tc, nil
}

// Close closes the listener and every accepted connection still open. It
// is idempotent. The connections' handler goroutines then return and
// close their connections, which wait observes.
func (l *trackingLayer) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	err := l.StreamLayer.Close()
	for _, c := range conns {
		c.closing.Store(true)
		_ = closeAbruptly(c.Conn)
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// isClosed reports whether Close was called.
func (l *trackingLayer) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// handlers returns the wait group of accepted connections whose handler
// has not finished; wait on it only after Close.
func (l *trackingLayer) handlers() *sync.WaitGroup { return &l.live }

// trackedConn leaves its layer when closed (by raft's handler, on exit).
type trackedConn struct {
	net.Conn
	layer   *trackingLayer
	once    sync.Once
	closing atomic.Bool // closed by the layer's Close
}

// Read reports a read cut short by the layer's Close as io.EOF, which raft
// treats as a peer hanging up, instead of an error it would log as one.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.closing.Load() {
		err = io.EOF
	}
	return n, err
}

// Close implements net.Conn.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.conns, c)
		c.layer.mu.Unlock()
		c.layer.live.Done()
	})
	return closeAbruptly(c.Conn) // connclose.go
}
