package faultnet

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Conn is a real TCP connection seen through the Network's rules: while its
// two nodes cannot reach each other its reads and writes block (until the
// rules allow, the deadline passes, or it is closed), and writes wait the
// configured delay first. Like a net.Conn, Read and Write may be called
// from different goroutines; Close may be called from any.
type Conn struct {
	net.Conn
	n *Network

	// local is the node owning this end; remote is resolved lazily for
	// accepted connections and guarded by n.mu.
	local      string
	remote     string
	remoteAddr string
	// dialed is true for the dialing end.
	dialed bool
	// recvDelay applies the remote->local delay on reads: the remote end is
	// not wrapped, so nobody delays its writes.
	recvDelay bool

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{}

	dlMu      sync.Mutex
	readDL    time.Time
	writeDL   time.Time
	dlChanged chan struct{}

	// rmu serialises reads, which own stash: bytes read from the socket
	// while a cut began, held back until the cut heals.
	rmu   sync.Mutex
	stash []byte
}

func newConn(n *Network, raw net.Conn, local, remote string, dialed, recvDelay bool) *Conn {
	return &Conn{
		Conn: raw, n: n, local: local, remote: remote, remoteAddr: raw.RemoteAddr().String(),
		dialed: dialed, recvDelay: recvDelay,
		closed: make(chan struct{}), dlChanged: make(chan struct{}),
	}
}

// Read reads from the socket once the rules let data flow.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.stash) > 0 {
		if err := c.pass(false); err != nil {
			return 0, err
		}
		k := copy(p, c.stash)
		c.stash = c.stash[k:]
		return k, nil
	}
	if err := c.pass(false); err != nil {
		return 0, err
	}
	k, err := c.Conn.Read(p)
	if k > 0 {
		// The rules may have changed while Read blocked: deliver only what
		// may flow now, holding the rest back without losing it.
		if perr := c.pass(false); perr != nil {
			c.stash = append([]byte(nil), p[:k]...)
			return 0, perr
		}
	}
	return k, err
}

// Write writes to the socket once the rules let data flow, after the
// configured delay.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.pass(true); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// pass blocks until data may flow in the given direction, then waits out
// the direction's delay. It fails on close or deadline.
func (c *Conn) pass(write bool) error {
	for {
		ok, out, in, changed := c.n.connState(c)
		if ok {
			d := in
			if write {
				d = out
			} else if !c.recvDelay {
				d = 0
			}
			return c.sleep(write, d)
		}
		if err := c.block(write, changed); err != nil {
			return err
		}
	}
}

// block waits for a rule change, a deadline change, the deadline, or close.
func (c *Conn) block(write bool, changed <-chan struct{}) error {
	dl, dlChanged := c.deadline(write)
	var timeout <-chan time.Time
	if !dl.IsZero() {
		wait := time.Until(dl)
		if wait <= 0 {
			return timeoutError{}
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-changed:
		return nil
	case <-dlChanged:
		return nil
	case <-timeout:
		return timeoutError{}
	case <-c.closed:
		return ErrClosed
	}
}

// sleep waits d (latency injection), cut short by close or the deadline.
func (c *Conn) sleep(write bool, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	var err error
	if dl, _ := c.deadline(write); !dl.IsZero() && time.Until(dl) < d {
		d, err = max(time.Until(dl), 0), timeoutError{}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return err
	case <-c.closed:
		return ErrClosed
	}
}

func (c *Conn) deadline(write bool) (time.Time, <-chan struct{}) {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	if write {
		return c.writeDL, c.dlChanged
	}
	return c.readDL, c.dlChanged
}

func (c *Conn) setDeadlines(read, write bool, t time.Time) {
	c.dlMu.Lock()
	if read {
		c.readDL = t
	}
	if write {
		c.writeDL = t
	}
	close(c.dlChanged)
	c.dlChanged = make(chan struct{})
	c.dlMu.Unlock()
}

// SetDeadline sets both deadlines, on the socket and on blocked waits.
func (c *Conn) SetDeadline(t time.Time) error {
	c.setDeadlines(true, true, t)
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline sets the read deadline, on the socket and on blocked
// reads.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.setDeadlines(true, false, t)
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline, on the socket and on blocked
// writes.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.setDeadlines(false, true, t)
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the socket and releases blocked reads and writes. It is
// idempotent.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.n.forget(c)
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

// listener wraps a node's listener: accepted connections follow the rules.
type listener struct {
	net.Listener
	n    *Network
	node string
}

func (l *listener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	c := newConn(l.n, raw, l.node, "", false, false)
	l.n.conns[c] = struct{}{}
	return c, nil
}

// streamLayer is a raft.StreamLayer: a wrapped listener plus the node's
// dialer.
type streamLayer struct {
	net.Listener
	n    *Network
	node string
}

// StreamLayer returns nodeID's raft transport stream layer, for
// node.Config.Raft.StreamLayer: it accepts on ln (wrapped as by Listener;
// its address is the node's Raft address) and dials through the rules.
// raft closes it (and so ln) when the transport shuts down.
func (n *Network) StreamLayer(nodeID string, ln net.Listener) raft.StreamLayer {
	return &streamLayer{Listener: n.Listener(nodeID, ln), n: n, node: nodeID}
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.n.dial(ctx, s.node, string(address))
}
