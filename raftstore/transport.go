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
// over real TCP on cfg.BindAddr when none is injected. Either way the layer
// is wrapped so that closing it also closes accepted connections (see
// trackingLayer).
func newTransport(cfg Config, logger *hclogAdapter) (*raft.NetworkTransport, *trackingLayer, error) {
	var inner raft.StreamLayer = cfg.StreamLayer
	if inner == nil {
		tcp, err := newTCPStreamLayer(cfg.BindAddr, cfg.AdvertiseAddr)
		if err != nil {
			return nil, nil, err
		}
		inner = tcp
	}
	layer := &trackingLayer{StreamLayer: inner, conns: make(map[net.Conn]struct{})}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: cfg.MaxPool,
		Timeout: cfg.TransportTimeout,
		Logger:  logger,
	})
	return trans, layer, nil
}

// tcpStreamLayer is the production raft.StreamLayer: a TCP listener plus a
// dialer, advertising an address that may differ from the bound one (NAT,
// wildcard binds).
type tcpStreamLayer struct {
	net.Listener
	advertise net.Addr
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
	return d.Dial("tcp", string(address))
}

// trackingLayer remembers accepted connections so Close can close them.
// raft's NetworkTransport does not: each accepted connection has a goroutine
// blocked reading it until the remote end hangs up, which would outlive
// Shutdown while peers keep their pooled connections open.
type trackingLayer struct {
	raft.StreamLayer

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // guarded by mu
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
	return tc, nil
}

// Close closes the listener and every accepted connection still open.
func (l *trackingLayer) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = make(map[net.Conn]struct{})
	l.mu.Unlock()
	err := l.StreamLayer.Close()
	for c := range conns {
		tc := c.(*trackedConn)
		tc.closing.Store(true)
		_ = tc.Conn.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (l *trackingLayer) forget(c *trackedConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// trackedConn removes itself from its layer when closed.
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

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.layer.forget(c) })
	return c.Conn.Close()
}
