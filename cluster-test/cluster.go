package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/cluster-test/faultnet"
	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	"github.com/concordmap/concord/raftstore"
	"github.com/concordmap/concord/raftstore/testlog"
)

// NodeState is where a harness node is in its life.
type NodeState int

// The states of a harness node.
const (
	NodeRunning NodeState = iota + 1
	NodeStopped           // graceful Shutdown; Restart brings it back
	NodeKilled            // Kill; Restart brings it back
	NodeRemoved           // Remove: stopped and taken out of the Raft configuration
	NodeLeft              // Leave: left gossip gracefully and shut down
)

func (s NodeState) String() string {
	return [...]string{"?", "running", "stopped", "killed", "removed", "left"}[s]
}

// Node is one server of a harness cluster. Its addresses stay the same
// across restarts (Raft stores peers' addresses, gossip seeds are fixed),
// and so does its data directory. Read it through the Cluster's lock: use
// the accessors.
type Node struct {
	Index int
	ID    string
	Dir   string
	// Addresses, host:port on 127.0.0.1, fixed for the node's life.
	HTTPAddr, GRPCAddr, RaftAddr, GossipAddr string

	c               *Cluster
	bootstrapExpect int
	srv             *node.Server
	state           NodeState
}

// Server returns the running node.Server, or nil when the node is down.
func (n *Node) Server() *node.Server {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.srv
}

// Store returns the running node's Raft store, or nil when it is down.
func (n *Node) Store() *raftstore.Store {
	if s := n.Server(); s != nil {
		return s.Store()
	}
	return nil
}

// State returns the node's harness state.
func (n *Node) State() NodeState {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.state
}

// MAPURL is the node's MAP WebSocket endpoint (valid while it runs):
// wss:// (clients trust the test CA, ClientTLS) unless WithInsecure.
func (n *Node) MAPURL() string {
	if s := n.Server(); s != nil {
		return s.MAPURL()
	}
	return "wss://" + n.HTTPAddr + "/map"
}

func (n *Node) String() string { return fmt.Sprintf("%s(#%d)", n.ID, n.Index) }

// Cluster is an in-process cluster of real nodes. Build it with New; it is
// closed by t.Cleanup. Its methods are called from the test goroutine
// (verbs that take a testing.TB fail it); accessors are safe anywhere.
type Cluster struct {
	t    testing.TB
	out  io.Writer // the test's output, detached once Close (and the rest of t's cleanups) ran
	opts options
	rng  *rand.Rand
	// Net routes every node's Raft and gRPC connections.
	Net *faultnet.Network
	// Ledger records acknowledged writes made through Clients of this
	// cluster, for RequireInvariants.
	Ledger *Ledger

	seeds    []string
	observer *leaderObserver
	issuer   *Issuer
	token    string // the harness's own bearer token: any participant

	mu     sync.Mutex
	nodes  []*Node
	closed bool
}

// New starts n nodes with BootstrapExpect = n, in a random order with a
// random stagger (WithStartOrder, WithStagger, WithSeed change that), and
// returns once every node is ready and they agree on a stable leader. It
// registers Close with t.Cleanup.
//
// Under -short (make test-short) it skips the test: a cluster takes seconds.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("clustertest: multi-node cluster skipped with -short")
	}
	o := buildOptions(opts)
	fn := o.net
	if fn == nil {
		fn = NewNetwork(t, o.netConfig)
	}
	c := &Cluster{t: t, opts: o, rng: rand.New(rand.NewPCG(o.seed, o.seed^0x5eed)), Net: fn, Ledger: &Ledger{}}
	// Before Close is registered, so the nodes' shutdown logs still reach
	// the test and a straggler's later write is dropped, not a panic.
	c.out = testlog.Output(t)
	c.issuer = NewIssuer(t)
	c.token = c.issuer.Token("clustertest", "*")
	t.Cleanup(c.Close)
	for i := range n {
		c.nodes = append(c.nodes, c.newNode(i, n))
	}
	for i := range min(o.joinSeeds, n) {
		c.seeds = append(c.seeds, c.nodes[i].GossipAddr)
	}
	c.observer = startLeaderObserver(c)
	c.startAll()
	c.Leader(t) // scenarios start from a settled cluster
	return c
}

// Token is a bearer token for any participant id and type, from the
// issuer every node of the cluster trusts.
func (c *Cluster) Token() string { return c.token }

// Issuer signs tokens the cluster's nodes accept.
func (c *Cluster) Issuer() *Issuer { return c.issuer }

// NewNetwork builds a fault network for one or more clusters
// (WithSharedNetwork); adjust, if not nil, changes its config.
func NewNetwork(t testing.TB, adjust func(*faultnet.Config)) *faultnet.Network {
	t.Helper()
	ncfg := faultnet.DefaultConfig()
	ncfg.Logger = testLogger(testlog.Output(t), "faultnet")
	if adjust != nil {
		adjust(&ncfg)
	}
	fn, err := faultnet.New(ncfg)
	if err != nil {
		t.Fatalf("clustertest: faultnet: %v", err)
	}
	return fn
}

// newNode reserves a node's fixed addresses and data dir.
func (c *Cluster) newNode(i, expect int) *Node {
	id := fmt.Sprintf("n%d", i+1)
	if c.opts.systemID != "" {
		id = c.opts.systemID + "-" + id
	}
	return &Node{
		Index: i, ID: id, Dir: filepath.Join(c.t.TempDir(), id),
		HTTPAddr: reservePort(c.t, false), RaftAddr: reservePort(c.t, false),
		GRPCAddr: reservePort(c.t, false), GossipAddr: reservePort(c.t, true),
		c: c, bootstrapExpect: expect, state: NodeStopped,
	}
}

// startAll starts every node concurrently (bootstrap-expect needs them all
// up before any is ready) in the configured order.
func (c *Cluster) startAll() {
	c.t.Helper()
	order := c.opts.order
	if order == nil {
		order = c.rng.Perm(len(c.nodes))
	}
	c.t.Logf("clustertest: starting %d nodes, order %v, seed %d", len(c.nodes), order, c.opts.seed)
	ctx, cancel := context.WithTimeout(context.Background(), FormTimeout)
	defer cancel()
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for k, i := range order {
		if k > 0 && c.opts.stagger > 0 {
			time.Sleep(time.Duration(c.rng.Int64N(int64(c.opts.stagger)))) // staggered arrival is the scenario
		}
		wg.Go(func() { errs[i] = c.start(ctx, c.nodes[i]) })
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c.nodes[i], err))
		}
	}
	if len(failed) > 0 {
		c.t.Fatalf("clustertest: start failed:\n  %s", strings.Join(failed, "\n  "))
	}
}

// config fills node n's config: FastConfig plus identity, addresses, the
// fault seams and a logger tagged with the node id.
func (c *Cluster) config(n *Node, raftLn net.Listener) node.Config {
	cfg := FastConfig()
	if c.opts.systemID != "" {
		cfg.SystemID = c.opts.systemID
	}
	cfg.NodeID = n.ID
	cfg.DataDir = n.Dir
	cfg.HTTPAddr = n.HTTPAddr
	cfg.RaftAddr = raftLn.Addr().String()
	cfg.GRPCAddr = n.GRPCAddr
	cfg.GossipAddr = n.GossipAddr
	cfg.Join = append([]string(nil), c.seeds...)
	cfg.BootstrapExpect = n.bootstrapExpect
	cfg.Raft.StreamLayer = c.Net.StreamLayer(n.ID, raftLn)
	cfg.GRPCDialer = c.Net.Dialer(n.ID)
	cfg.Logger = testLogger(c.out, n.ID)
	cfg.ACL.JWT = c.issuer.JWTConfig()
	cfg.ACL.AnonymousTypes = []string{"agent", "client"}
	cfg.TLS = tlstest.Server(cfg.SystemID, n.ID)
	if c.opts.logLevel != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(c.out, &slog.HandlerOptions{Level: *c.opts.logLevel})).With("node", n.ID)
	}
	for _, m := range c.opts.mutate {
		m(n.Index, &cfg)
	}
	return cfg
}

// start builds and starts node n (first start or restart) and records it
// as running. It does not touch testing.TB, so it may run on any goroutine.
func (c *Cluster) start(ctx context.Context, n *Node) error {
	raftLn, err := listenRaft(ctx, n.RaftAddr)
	if err != nil {
		return err
	}
	c.Net.Register(n.ID, n.GRPCAddr)
	srv, err := node.New(c.config(n, raftLn))
	if err != nil {
		_ = raftLn.Close()
		return fmt.Errorf("node.New: %w", err)
	}
	c.mu.Lock()
	n.RaftAddr, n.HTTPAddr = raftLn.Addr().String(), srv.HTTPAddr()
	n.srv, n.state = srv, NodeRunning
	c.mu.Unlock()
	if err := srv.Start(ctx); err != nil {
		// Keep it registered as running: Close (or the caller) shuts it
		// down, and its logs explain the failure.
		return fmt.Errorf("Start: %w", err)
	}
	return nil
}

// listenRaft binds the node's Raft listener on its reserved address (the
// same on restarts: peers have it in their configuration). Binding is
// retried briefly in case the kernel still holds the port.
func listenRaft(ctx context.Context, addr string) (net.Listener, error) {
	var lastErr error
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listen raft %s: %w", addr, lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// reservePort returns a free 127.0.0.1 port (TCP, and UDP too when udp),
// released for the node to bind. Gossip seeds and gRPC addresses must be
// known before the node binds them, so port 0 cannot be read back there.
//
// The port is drawn below the kernel's ephemeral range: a port from bind
// to port 0 is also what outgoing connections get as their local port,
// and on a busy machine one of them took a reserved port before the node
// bound it. Below the range only explicit binds compete.
func reservePort(t testing.TB, udp bool) string {
	t.Helper()
	lo, hi := reserveRange()
	for range 200 {
		port := lo + portRand.IntN(hi-lo)
		if !claimPort(port) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if udp {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				_ = ln.Close()
				continue
			}
			_ = pc.Close()
		}
		_ = ln.Close()
		return addr
	}
	t.Fatal("clustertest: no free port after 200 tries")
	return ""
}

// claimed holds every port reservePort handed out in this test binary:
// a reserved port is free until its node binds it, so without this two
// reservations could draw the same one.
var (
	claimedMu sync.Mutex
	claimed   = map[int]bool{}
)

func claimPort(port int) bool {
	claimedMu.Lock()
	defer claimedMu.Unlock()
	if claimed[port] {
		return false
	}
	claimed[port] = true
	return true
}

// portRand draws candidate ports; it is safe for concurrent use.
var portRand = rand.New(&lockedSource{src: rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid()))})

type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// reserveRange is [10000, start of the ephemeral range), or [10000, 32768)
// when the range cannot be read.
func reserveRange() (lo, hi int) {
	lo, hi = 10000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if start, err := strconv.Atoi(f[0]); err == nil && start > lo+1000 {
			hi = start
		}
	}
	return lo, hi
}

// testLogger logs to out (a test's output from testlog.Output: shown only
// for failing tests or -v), tagged with the node id.
// CONCORD_TEST_LOG_LEVEL=debug|info|warn|error sets the level (default info).
func testLogger(out io.Writer, nodeID string) *slog.Logger {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(strings.ToUpper(os.Getenv("CONCORD_TEST_LOG_LEVEL"))))
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level})).With("node", nodeID)
}
