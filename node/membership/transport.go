package membership

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Memberlist's TCP exchanges (a join's push/pull, a periodic push/pull,
// a fallback probe) wait up to TCPTimeout (10 s on a LAN) for a peer
// that accepted the connection and stopped reading (a frozen process).
// Shutdown waits for an in-flight join, and a join tries each seed in
// turn, so a frozen seed held a shutdown TCPTimeout per seed. The
// transport below tracks the connections memberlist dials; Shutdown cuts
// them first and refuses new dials, so the exchange fails at once.

// cutTransport is memberlist's NetTransport whose dialled connections
// Shutdown can cut.
type cutTransport struct {
	*memberlist.NetTransport

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// errGossipShutdown is what a dial gets once the transport was cut.
var errGossipShutdown = errors.New("gossip is shutting down")

// newCutTransport binds the transport as memberlist.Create would
// (retrying a dynamic port that one protocol found taken), and sets
// mc's ports to the one bound when mc.BindPort is 0.
func newCutTransport(mc *memberlist.Config) (*cutTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger}
	tries := 1
	if mc.BindPort == 0 {
		tries = 10 // UDP and TCP must both get the port the kernel picked
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gossip transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	return &cutTransport{NetTransport: nt, conns: make(map[net.Conn]struct{})}, nil
}

// DialTimeout implements memberlist.Transport.
func (t *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.track(t.NetTransport.DialTimeout(addr, timeout))
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *cutTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.track(t.NetTransport.DialAddressTimeout(a, timeout))
}

func (t *cutTransport) track(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		_ = c.Close()
		return nil, errGossipShutdown
	}
	tc := &cutConn{Conn: c, t: t}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// cutAll closes every dialled connection and refuses new dials.
func (t *cutTransport) cutAll() {
	t.mu.Lock()
	t.cut = true
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	clear(t.conns)
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.(*cutConn).Conn.Close()
	}
}

// cutConn leaves its transport's set when closed.
type cutConn struct {
	net.Conn
	t    *cutTransport
	once sync.Once
}

func (c *cutConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}
