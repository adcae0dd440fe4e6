package raftstore

import (
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// Raft transport connections are closed abruptly, without crypto/tls's
// close_notify. That alert is a write, and crypto/tls bounds it by 5 s
// (setting its own write deadline, so a shorter one set before Close has
// no effect); toward a peer that stopped reading (a partitioned voter
// with a full socket buffer) every close then waits those 5 s. Callers
// that wait on a close include raft's own goroutines (a replication
// goroutine closing its pipeline, the leader loop through the early
// append), raft.Shutdown (which waits for them), Store.Shutdown (which
// waits for the accepted connections' handlers) and a transport reset.
// The alert buys nothing here: raft's messages are self-delimiting, and a
// peer reading a TLS connection that ends at a record boundary sees io.EOF
// either way, as raft expects of a peer hanging up.

// closeAbruptly closes conn's socket underneath any TLS layer: prompt
// whatever the peer does.
func closeAbruptly(conn net.Conn) error {
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		return tc.NetConn().Close()
	}
	return conn.Close()
}

// Dial implements raft.StreamLayer: the inner layer's connection,
// tracked so that Shutdown can cut it (dialcut.go) and closed abruptly.
// raft's NetworkTransport closes the connections it dialled (pool
// overflow, failed RPCs, CloseStreams, pipelines) with a plain Close.
func (l *trackingLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if err := l.dials.refused(); err != nil {
		return nil, err
	}
	c, err := l.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return l.dials.track(c)
}
