package tlsconf

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concordmap/concord/node/pki"
)

// StreamLayer wraps inner (TCP, or a test's fault-injecting layer) in
// mutual TLS for the Raft transport. Both directions require a server
// certificate of the system that authorize accepts (a current member), so
// a stranger can neither send Raft RPCs nor receive them. Accepted
// connections handshake on first read, in raft's per-connection goroutine,
// so a slow or hostile client never stalls the accept loop; dials
// handshake before returning, within raft's dial timeout.
func (m *Manager) StreamLayer(inner raft.StreamLayer, authorize func(pki.Identity) error) *RaftLayer {
	e := Expect{Role: pki.RoleServer, Authorize: authorize}
	return &RaftLayer{
		StreamLayer: inner,
		m:           m,
		authorize:   authorize,
		server:      m.ServerConfig("raft", ClientAuthRequire, e),
		client:      m.ClientConfig(e),
	}
}

// RaftLayer is the TLS raft.StreamLayer StreamLayer returns. Safe for
// concurrent use.
type RaftLayer struct {
	raft.StreamLayer
	m              *Manager
	authorize      func(pki.Identity) error
	server, client *tls.Config
}

// Accept implements net.Listener.
func (l *RaftLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

// Dial implements raft.StreamLayer.
func (l *RaftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return handshake(c, l.client, address, timeout)
}

// Probe proves that the server at address holds a certificate of this
// system for node nodeID (and passes authorize): a TLS handshake, then the
// connection is closed. The leader probes a server before adding it as a
// voter, so a stranger who only learned the gossip key cannot become one.
func (l *RaftLayer) Probe(address raft.ServerAddress, nodeID string, timeout time.Duration) error {
	c, err := l.StreamLayer.Dial(address, timeout)
	if err != nil {
		return err
	}
	cfg := l.m.ClientConfig(Expect{Role: pki.RoleServer, NodeID: nodeID, Authorize: l.authorize})
	tc, err := handshake(c, cfg, address, timeout)
	if err != nil {
		return err
	}
	return tc.Close()
}

func handshake(c net.Conn, cfg *tls.Config, address raft.ServerAddress, timeout time.Duration) (*tls.Conn, error) {
	tc := tls.Client(c, cfg)
	if timeout > 0 {
		_ = tc.SetDeadline(time.Now().Add(timeout))
	}
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("tls handshake with raft peer %s: %w", address, err)
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}
