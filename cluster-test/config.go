package clustertest

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/concordmap/concord/cluster-test/faultnet"
	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/tlsconf"
)

// Fast timings of FastConfig, exported so scenarios can reason about them
// (an election window, the cleanup delay) instead of repeating numbers.
// The Raft ones scale with CONCORD_TEST_TIMEOUT_SCALE too.
//
// Why 300 ms and not the 50-100 ms of STYLE.md §4: under -race with a
// load average of 8-12 on the shared 2-core machine, leaders stepped down
// ("failed to contact quorum of nodes") with last contacts of 105-170 ms
// at 100 ms, and of up to 230 ms at 200 ms, and 5-node elections churned
// for 20 s at 100 ms. Every step-down fails in-flight writes, which turned
// scenarios into lotteries.
var (
	// RaftHeartbeat is raft's heartbeat (follower) timeout and the leader
	// lease.
	RaftHeartbeat = scaled(300 * time.Millisecond)
	// RaftElection is raft's election timeout.
	RaftElection = scaled(300 * time.Millisecond)
	// ElectionWindow is how long a leader must stay put to count as stable:
	// raft randomises timeouts in [T, 2T].
	ElectionWindow = 2 * RaftElection
)

const (
	// TunedRaftMultiplier is the raft timing profile benchmarks call
	// "tuned": `concord server --raft-multiplier 1`, the fastest one
	// operators can pick (100 ms heartbeat, election and lease;
	// raftstore.LANTimings). Not used by tests: under -race on the shared
	// machine it is too tight (see RaftHeartbeat).
	TunedRaftMultiplier = 1

	// DeadServerCleanupDelay is how long the reconciler waits before it
	// removes a dead server from the Raft configuration.
	DeadServerCleanupDelay = 2 * time.Second
	// ForwardRetryTimeout is how long a follower keeps retrying to reach a
	// leader before answering "no leader".
	ForwardRetryTimeout = time.Second
)

// FastConfig returns the one preset of test timings (STYLE.md §4): a
// node.Config with 300 ms raft heartbeat/election (see RaftHeartbeat), membership.TestTimings,
// short forwarding/relay/reconcile bounds and plaintext gossip. Identity,
// addresses, data dir, join list, bootstrap and the fault seams are filled
// in per node by the harness. Production defaults are never changed to
// speed tests up; only this preset is.
func FastConfig() node.Config {
	c := node.DefaultConfig()
	c.SystemID = SystemID
	c.GossipPlaintext = true
	c.ReadyTimeout = NodeReadyTimeout
	c.ShutdownTimeout = ShutdownTimeout
	c.DrainTimeout = scaled(30 * time.Second)

	c.Raft.HeartbeatTimeout = RaftHeartbeat
	c.Raft.ElectionTimeout = RaftElection
	c.Raft.LeaderLeaseTimeout = RaftHeartbeat
	c.Raft.CommitTimeout = 10 * time.Millisecond
	c.Raft.TransportTimeout = 2 * time.Second
	c.Raft.ApplyTimeout = scaled(5 * time.Second)

	c.Membership.Timings = membership.TestTimings()
	c.Membership.JoinRetryInterval = 50 * time.Millisecond
	c.Membership.JoinMaxBackoff = 500 * time.Millisecond
	c.Membership.LeaveTimeout = 2 * time.Second
	c.Membership.DeadMemberRetention = 10 * time.Minute

	c.Cluster.DialTimeout = 500 * time.Millisecond
	c.Cluster.ForwardRetryTimeout = ForwardRetryTimeout
	c.Cluster.ForwardMaxBackoff = 100 * time.Millisecond
	c.Cluster.RelayDeliveryTimeout = 2 * time.Second
	c.Cluster.RelayReconnectMaxBackoff = 250 * time.Millisecond
	c.Cluster.ReconcileInterval = 200 * time.Millisecond
	c.Cluster.ReconcileTimeout = 2 * time.Second
	c.Cluster.DeadServerCleanupDelay = DeadServerCleanupDelay
	c.Cluster.MinQuorum = 3
	// A joining server is promoted after a second of good health instead
	// of production's ten; contact may lag under -race on a loaded host.
	c.Cluster.ServerStabilizationTime = time.Second
	c.Cluster.LastContactThreshold = scaled(1500 * time.Millisecond)
	c.Cluster.DetachedSessionTTL = 10 * time.Minute

	c.MAP.DetachedSessionTTL = 10 * time.Minute
	c.MAP.ExpiryInterval = 100 * time.Millisecond
	c.MAP.CloseTimeout = time.Second

	c.Federation.Plaintext = true
	c.Federation.DirectorySync = 200 * time.Millisecond
	c.Federation.Ping = scaled(500 * time.Millisecond)
	c.Federation.BackoffMin = 50 * time.Millisecond
	c.Federation.BackoffMax = 500 * time.Millisecond
	c.Federation.CallTimeout = scaled(5 * time.Second)
	c.Federation.AckTimeout = scaled(10 * time.Second)
	// A guaranteed send answers its peer's outcome only within this wait
	// (else "queued"): scaled, as the commits on both sides slow down.
	c.Federation.GuaranteedWait = scaled(2 * time.Second)
	c.Federation.UnlinkRetry = 200 * time.Millisecond
	return c
}

// Option adjusts a cluster before it starts.
type Option func(*options)

type options struct {
	seed      uint64
	seedSet   bool
	joinSeeds int
	stagger   time.Duration
	order     []int
	mutate    []func(i int, c *node.Config)
	netConfig func(*faultnet.Config)
	logLevel  *slog.Level
	systemID  string            // WithSystem: system id and node id prefix
	net       *faultnet.Network // WithSharedNetwork
}

// WithSystem names the cluster's system (node.Config.SystemID) and
// prefixes its node ids with it ("dc1-n1"), so clusters of several
// systems can share one fault network (WithSharedNetwork).
func WithSystem(id string) Option {
	return func(o *options) { o.systemID = id }
}

// WithSharedNetwork routes the cluster's connections through n instead of
// a fault network of its own: federation tests partition systems from
// each other with it. Node ids must then be unique across the clusters
// (WithSystem).
func WithSharedNetwork(n *faultnet.Network) Option {
	return func(o *options) { o.net = n }
}

// WithSeed fixes the random source of start order and staggering (the
// seed in use is logged, so a failing order can be replayed).
func WithSeed(seed uint64) Option {
	return func(o *options) { o.seed, o.seedSet = seed, true }
}

// WithStartOrder starts the nodes in this order (indexes from 0) instead
// of a random one.
func WithStartOrder(order ...int) Option {
	return func(o *options) { o.order = order }
}

// WithStagger starts node k of the order after a random pause in
// [0, max) from the previous one (default 150 ms), so gossip sees servers
// arrive one by one.
func WithStagger(maxPause time.Duration) Option {
	return func(o *options) { o.stagger = maxPause }
}

// WithJoinSeeds sets how many of the first nodes' gossip addresses every
// node joins (default 3).
func WithJoinSeeds(k int) Option {
	return func(o *options) { o.joinSeeds = k }
}

// WithNodeConfig adjusts node i's config after the harness filled it.
func WithNodeConfig(f func(i int, c *node.Config)) Option {
	return func(o *options) { o.mutate = append(o.mutate, f) }
}

// WithInsecure runs the nodes without TLS (plaintext, unauthenticated):
// for benchmarks that measure what TLS costs.
func WithInsecure() Option {
	return WithNodeConfig(func(_ int, c *node.Config) { c.TLS, c.Insecure = tlsconf.Config{}, true })
}

// WithLogLevel sets the nodes' log level (benchmarks use warn: raft's info
// logs would be part of what they measure), overriding
// CONCORD_TEST_LOG_LEVEL.
func WithLogLevel(l slog.Level) Option {
	return func(o *options) { o.logLevel = &l }
}

// WithNetwork adjusts the fault network's config.
func WithNetwork(f func(*faultnet.Config)) Option {
	return func(o *options) { o.netConfig = f }
}

func buildOptions(opts []Option) options {
	o := options{joinSeeds: 3, stagger: 150 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.seedSet {
		o.seed = rand.Uint64()
	}
	return o
}
