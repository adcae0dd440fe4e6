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
func (m *Manager) StreamLayer(inner raft.StreamLayer, authorize func(pki.Identity) error) raft.StreamLayer {
	e := Expect{Role: pki.RoleServer, Authorize: authorize}
	return &streamLayer{
		StreamLayer: inner,
		server:      m.ServerConfig("raft", ClientAuthRequire, e),
		client:      m.ClientConfig(e),
	}
}

type streamLayer struct {
	raft.StreamLayer
	server, client *tls.Config
}

// Accept implements net.Listener.
func (l *streamLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

// Dial implements raft.StreamLayer.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.client)
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
