package faultnet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"
)

// Config configures a Network.
type Config struct {
	// CloseOnCut closes live connections that a rule change makes
	// unreachable, instead of blackholing them until Heal. Closing shows
	// the application an immediate error (like a RST); blackholing shows a
	// silent peer that only timeouts and keepalives detect.
	CloseOnCut bool

	// DialTimeout bounds a dial (and its wait for reachability) when
	// neither the caller's context nor its timeout does.
	DialTimeout time.Duration

	// Logger receives rule changes (Info) and cut connections (Debug); nil
	// discards.
	Logger *slog.Logger
}

// DefaultConfig returns a Network config that blackholes cut connections.
func DefaultConfig() Config {
	return Config{DialTimeout: 10 * time.Second}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.DialTimeout <= 0 {
		return fmt.Errorf("faultnet: DialTimeout must be > 0")
	}
	return nil
}

// link is one direction between two nodes.
type link struct{ from, to string }

// Network routes every test connection through its rules. All methods are
// safe for concurrent use. A Network owns no goroutines; it tracks the
// connections made through it until they close.
type Network struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// addrs maps a listening address to the node that owns it; wrapped
	// marks addresses whose accepted connections are wrapped too.
	addrs   map[string]string
	wrapped map[string]bool
	// dialers maps the local address of a connection dialed through the
	// Network to the dialing node, so the accepting side can name it.
	dialers map[string]string
	// groups is the partition: node -> group number; nil when there is no
	// partition. Nodes not named in a partition are alone.
	groups   map[string]int
	isolated map[string]bool
	delays   map[link]time.Duration
	cuts     map[link]bool // pairs cut apart (both directions stored)
	conns    map[*Conn]struct{}
	// changed is closed (and replaced) on every rule change, waking every
	// blocked dial, read and write to re-check the rules.
	changed chan struct{}
}

// New returns a Network with no rules: everything reaches everything.
func New(cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Network{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "faultnet"),
		addrs:    map[string]string{},
		wrapped:  map[string]bool{},
		dialers:  map[string]string{},
		isolated: map[string]bool{},
		delays:   map[link]time.Duration{},
		cuts:     map[link]bool{},
		conns:    map[*Conn]struct{}{},
		changed:  make(chan struct{}),
	}, nil
}

// Register maps addr (host:port, as peers dial it) to nodeID, for
// listeners the Network does not wrap (a node's own gRPC listener).
// Registering an address again moves it to the new node.
func (n *Network) Register(nodeID, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs[addr] = nodeID
}

// NodeOf returns the node registered for addr, "" if none.
func (n *Network) NodeOf(addr string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrs[addr]
}

// Partition splits the nodes into groups that reach only their own members.
// A node named in no group reaches nobody. It replaces an earlier
// partition; isolation and delays stay.
func (n *Network) Partition(groups ...[]string) {
	g := map[string]int{}
	for i, members := range groups {
		for _, id := range members {
			g[id] = i
		}
	}
	n.change("partition", func() { n.groups = g }, "groups", fmt.Sprint(groups))
}

// Isolate cuts nodeID off from every other node until Rejoin or Heal.
func (n *Network) Isolate(nodeID string) {
	n.change("isolate", func() { n.isolated[nodeID] = true }, "peer", nodeID)
}

// Rejoin undoes Isolate for one node (a partition still applies).
func (n *Network) Rejoin(nodeID string) {
	n.change("rejoin", func() { delete(n.isolated, nodeID) }, "peer", nodeID)
}

// Cut cuts node a from each of bs, both ways, until Heal; every other
// path (a to other nodes, bs among themselves) stays as the other rules
// say: one node's streams to another system, say, while its own
// system's nodes still reach it.
func (n *Network) Cut(a string, bs ...string) {
	n.change("cut", func() {
		for _, b := range bs {
			n.cuts[link{a, b}], n.cuts[link{b, a}] = true, true
		}
	}, "peer", a, "from", fmt.Sprint(bs))
}

// Delay adds d of latency to every write from node from to node to (one
// direction; call twice for both). d <= 0 removes the delay.
func (n *Network) Delay(from, to string, d time.Duration) {
	n.change("delay", func() {
		if d <= 0 {
			delete(n.delays, link{from, to})
			return
		}
		n.delays[link{from, to}] = d
	}, "from", from, "to", to, "delay", d)
}

// Heal removes every partition, isolation and delay. Blackholed
// connections resume.
func (n *Network) Heal() {
	n.change("heal", func() {
		n.groups = nil
		clear(n.isolated)
		clear(n.delays)
		clear(n.cuts)
	})
}

// DropConns closes every live connection to or from nodeID now. New dials
// are not affected (combine with Isolate to keep the node away).
func (n *Network) DropConns(nodeID string) {
	var drop []*Conn
	n.mu.Lock()
	for c := range n.conns {
		if c.local == nodeID || n.remoteLocked(c) == nodeID {
			drop = append(drop, c)
		}
	}
	n.mu.Unlock()
	n.log.Info("drop connections", "peer", nodeID, "count", len(drop))
	for _, c := range drop {
		_ = c.Close()
	}
}

// Reachable reports whether data flows from node from to node to under the
// current rules. An empty id (an endpoint the Network does not know) is
// always reachable.
func (n *Network) Reachable(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reachableLocked(from, to)
}

// Conns returns the number of live connections the Network tracks.
func (n *Network) Conns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.conns)
}

func (n *Network) reachableLocked(from, to string) bool {
	if from == "" || to == "" || from == to {
		return true
	}
	if n.isolated[from] || n.isolated[to] || n.cuts[link{from, to}] {
		return false
	}
	if n.groups == nil {
		return true
	}
	gf, okf := n.groups[from]
	gt, okt := n.groups[to]
	return okf && okt && gf == gt
}

// change applies a rule change under the lock, wakes every waiter, and with
// CloseOnCut closes the live connections that became unreachable.
func (n *Network) change(what string, apply func(), attrs ...any) {
	n.mu.Lock()
	apply()
	close(n.changed)
	n.changed = make(chan struct{})
	var cut []*Conn
	if n.cfg.CloseOnCut {
		for c := range n.conns {
			if !n.reachableLocked(c.local, n.remoteLocked(c)) {
				cut = append(cut, c)
			}
		}
	}
	n.mu.Unlock()
	n.log.Info("rules changed", append([]any{"rule", what}, attrs...)...)
	for _, c := range cut {
		n.log.Debug("close cut connection", "node", c.local, "remote_addr", c.remoteAddr)
		_ = c.Close()
	}
}

// connState returns whether c's two ends reach each other, the delays on
// its outbound and inbound directions, and the channel closed at the next
// rule change.
func (n *Network) connState(c *Conn) (ok bool, out, in time.Duration, changed <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// The accepting side learns its peer lazily: the dialer registers its
	// local address just after connect, possibly after Accept returned.
	r := n.remoteLocked(c)
	return n.reachableLocked(c.local, r), n.delays[link{c.local, r}], n.delays[link{r, c.local}], n.changed
}

// remoteLocked resolves and caches c's remote node id.
func (n *Network) remoteLocked(c *Conn) string {
	if c.remote == "" && c.remoteAddr != "" {
		if id, ok := n.dialers[c.remoteAddr]; ok {
			c.remote = id
		}
	}
	return c.remote
}

// Listener wraps ln, owned by nodeID: its address is registered for nodeID
// and every accepted connection goes through the rules. Closing the wrapper
// closes ln.
func (n *Network) Listener(nodeID string, ln net.Listener) net.Listener {
	addr := ln.Addr().String()
	n.mu.Lock()
	n.addrs[addr] = nodeID
	n.wrapped[addr] = true
	n.mu.Unlock()
	return &listener{Listener: ln, n: n, node: nodeID}
}

// Dialer returns nodeID's dialer, for node.Config.GRPCDialer: it maps the
// target address to a node, waits while that node is unreachable (bounded
// by ctx), then dials real TCP and wraps the connection.
func (n *Network) Dialer(nodeID string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) { return n.dial(ctx, nodeID, addr) }
}

func (n *Network) dial(ctx context.Context, from, addr string) (net.Conn, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.DialTimeout)
		defer cancel()
	}
	to := n.NodeOf(addr)
	for {
		n.mu.Lock()
		ok, changed := n.reachableLocked(from, to), n.changed
		n.mu.Unlock()
		if ok {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("%w: %s -> %s (%s)", ErrUnreachable, from, to, addr)}
		}
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	c := newConn(n, raw, from, to, true, !n.wrapped[addr])
	n.dialers[raw.LocalAddr().String()] = from
	n.conns[c] = struct{}{}
	return c, nil
}

// forget drops a closed connection from the tables.
func (n *Network) forget(c *Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.conns, c)
	if c.dialed {
		delete(n.dialers, c.Conn.LocalAddr().String())
	}
}

// Nodes returns the node ids the Network knows addresses of, sorted.
func (n *Network) Nodes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []string
	for _, id := range n.addrs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
