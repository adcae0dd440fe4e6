package connclose

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"

	"google.golang.org/grpc/credentials"
)

// Credentials wraps gRPC transport credentials so that the connections
// they secure close promptly: their Close is Close with Grace, and Abort
// cuts every socket they secure at once (what a ClientConn's Close needs
// when the peer stopped reading; see CloseWithin). A Credentials value
// tracks the connections of the client or server it was given to: create
// one per grpc.ClientConn to abort only that one's.
type Credentials struct {
	credentials.TransportCredentials
	*tracker
}

// NewCredentials wraps inner (TLS, or insecure for plaintext: gRPC's own
// close wait is not TLS's).
func NewCredentials(inner credentials.TransportCredentials) *Credentials {
	return &Credentials{TransportCredentials: inner, tracker: &tracker{raws: map[net.Conn]struct{}{}}}
}

// tracker holds the sockets under the connections of a Credentials, from
// the start of their handshake (so an abort also ends a stalled one) to
// their close.
type tracker struct {
	mu   sync.Mutex
	raws map[net.Conn]struct{}
}

func (t *tracker) add(raw net.Conn) {
	t.mu.Lock()
	t.raws[raw] = struct{}{}
	t.mu.Unlock()
}

func (t *tracker) remove(raw net.Conn) {
	t.mu.Lock()
	delete(t.raws, raw)
	t.mu.Unlock()
}

// Abort closes the socket of every connection open or handshaking now,
// underneath TLS: writes blocked on a stalled peer fail at once.
// Connections made later are not affected.
func (t *tracker) Abort() {
	t.mu.Lock()
	raws := make([]net.Conn, 0, len(t.raws))
	for raw := range t.raws {
		raws = append(raws, raw)
	}
	t.mu.Unlock()
	for _, raw := range raws {
		_ = raw.Close()
	}
}

// ClientHandshake implements credentials.TransportCredentials.
func (c *Credentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c.add(raw)
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		c.remove(raw)
		return nil, nil, err
	}
	return &conn{Conn: out, raw: raw, t: c.tracker}, info, nil
}

// ServerHandshake implements credentials.TransportCredentials.
func (c *Credentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c.add(raw)
	out, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.remove(raw)
		return nil, nil, err
	}
	return &conn{Conn: out, raw: raw, t: c.tracker}, info, nil
}

// Clone implements credentials.TransportCredentials; the clone shares the
// tracker, so Abort covers its connections too.
func (c *Credentials) Clone() credentials.TransportCredentials {
	return &Credentials{TransportCredentials: c.TransportCredentials.Clone(), tracker: c.tracker}
}

// conn is a connection made by Credentials: Conn as the inner credentials
// returned it (TLS, or raw itself), raw the socket under it.
type conn struct {
	net.Conn
	raw net.Conn
	t   *tracker
}

// Close implements net.Conn: the goodbye if it goes out within Grace.
func (c *conn) Close() error {
	c.t.remove(c.raw)
	if c.Conn == c.raw {
		return c.raw.Close()
	}
	return closeWithCut(c.Conn, c.raw, Grace)
}

var errNoSyscallConn = errors.New("connclose: the socket has no syscall.RawConn")

// SyscallConn exposes the socket's, as gRPC's own TLS credentials do (for
// channelz's socket options).
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.raw.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoSyscallConn
}
