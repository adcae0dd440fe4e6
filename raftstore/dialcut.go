package raftstore

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Cutting dialled connections at shutdown.
//
// raft.Shutdown waits for raft's goroutines, and a replication or
// heartbeat goroutine may be inside an RPC to a peer that stopped
// reading (a SIGSTOP'd process, a peer that accepted TCP and hung): its
// write or its read of the answer then waits for TransportTimeout (10 s),
// past a node's whole shutdown budget. raft closes the transport only
// after its goroutines returned, so nothing frees them sooner. Store's
// Shutdown therefore gives raft shutdownGrace to stop on its own (the
// healthy case: an RPC in flight to a live peer ends in milliseconds)
// and then cuts every connection the transport dialled and refuses new
// dials, so raft cannot dial again in the window before its goroutines
// see the shutdown. A dial in progress (a TLS handshake with a frozen
// peer waits out the dial timeout too) is cut as well: tcpStreamLayer
// registers its raw sockets in the same set, and closing the socket
// under the handshake ends it.

// shutdownGrace is how long Shutdown lets raft stop on its own before it
// cuts the transport's dialled connections.
const shutdownGrace = 300 * time.Millisecond

// dialSet tracks the transport's dialled connections (both the ones
// raft's transport and the append sender use, and the raw sockets under
// any TLS layer) until cut closes them all and refuses further dials.
type dialSet struct {
	ctx    context.Context // cancelled by cut: ends connects in progress
	cancel context.CancelFunc

	mu    sync.Mutex
	cut   bool
	conns map[*dialledConn]struct{} // open, not yet closed; guarded by mu
}

func newDialSet() *dialSet {
	ctx, cancel := context.WithCancel(context.Background())
	return &dialSet{ctx: ctx, cancel: cancel, conns: make(map[*dialledConn]struct{})}
}

// errDialsCut is what a dial gets once the set was cut: the transport is
// shutting down.
var errDialsCut = fmt.Errorf("dial refused, the transport is shutting down: %w", raft.ErrTransportShutdown)

// refused returns errDialsCut once the set was cut.
func (d *dialSet) refused() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return errDialsCut
	}
	return nil
}

// track registers c, returning it wrapped so that closing it leaves the
// set; once the set was cut it closes c and refuses it.
func (d *dialSet) track(c net.Conn) (net.Conn, error) {
	dc := &dialledConn{Conn: c, set: d}
	d.mu.Lock()
	cut := d.cut
	if !cut {
		d.conns[dc] = struct{}{}
	}
	d.mu.Unlock()
	if cut {
		_ = closeAbruptly(c)
		return nil, errDialsCut
	}
	return dc, nil
}

// cutAll closes every tracked connection abruptly, ends connects in
// progress and refuses every later dial. Idempotent.
func (d *dialSet) cutAll() int {
	d.mu.Lock()
	d.cut = true
	conns := make([]*dialledConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	clear(d.conns)
	d.mu.Unlock()
	d.cancel()
	for _, c := range conns {
		_ = closeAbruptly(c.Conn)
	}
	return len(conns)
}

// dialledConn is a tracked dialled connection; Close leaves the set and
// closes abruptly (connclose.go). It deliberately has no NetConn method:
// closeAbruptly must reach this Close, not the socket under it.
type dialledConn struct {
	net.Conn
	set  *dialSet
	once sync.Once
}

// Close implements net.Conn.
func (c *dialledConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return closeAbruptly(c.Conn)
}

// shutdownRaft shuts raft down and waits for it; if raft has not stopped
// within shutdownGrace, it cuts the transport's dialled connections (see
// above) and waits on.
func (s *Store) shutdownRaft() error {
	f := s.raft.Shutdown()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	s.graceCut = true
	n := s.layer.dials.cutAll()
	s.trans.sender.closeConns(true)
	s.log.Info("raft still stopping after the grace: cut the transport's dialled connections",
		"grace", shutdownGrace, "connections", n)
	return <-done
}
