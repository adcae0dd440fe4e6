package membership

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures one node's LAN membership. Start from DefaultConfig and
// override; New validates it. A Config is copied by New: changing it (or the
// slices it holds) afterwards has no effect on a running Membership.
type Config struct {
	// NodeID identifies this node in its system. It is the memberlist node
	// name and, by convention, the Raft server id, so it must be unique per
	// system and stable across restarts. 1..128 bytes of [A-Za-z0-9._:-].
	NodeID string

	// SystemID names the system (cluster) this node belongs to. Peers that
	// advertise another SystemID are ignored: not tracked, not counted, and a
	// join to a seed of another system fails. Same character rules as NodeID.
	SystemID string

	// BindAddr is the IP the gossip listeners (UDP and TCP) bind to.
	// "0.0.0.0" binds all interfaces.
	BindAddr string

	// BindPort is the gossip port, UDP and TCP. 0 picks a free port (tests);
	// read it back from LocalMember().GossipAddr after Start.
	BindPort int

	// AdvertiseAddr is the IP peers use to reach this node. Empty means the
	// bind address, or a private interface address when bound to 0.0.0.0.
	AdvertiseAddr string

	// AdvertisePort is the port peers use to reach this node; 0 means the
	// bound port (useful behind NAT or port mapping only).
	AdvertisePort int

	// Meta is what this node advertises about itself beyond its ids: the
	// addresses of its other listeners, its version and its role. It travels
	// in every gossip alive message; the encoded form (with NodeID, SystemID
	// and BootstrapExpect) must stay under memberlist's 512-byte meta limit,
	// which Validate checks.
	Meta NodeMeta

	// GossipKey is the AES key (16, 24 or 32 bytes, selecting AES-128/192/256)
	// that encrypts and authenticates all gossip. Nodes with different keys
	// cannot join each other. Required unless AllowPlaintext is set.
	GossipKey []byte

	// AllowPlaintext permits an empty GossipKey, i.e. unauthenticated,
	// unencrypted gossip. Only `concord server --dev` sets it.
	AllowPlaintext bool

	// KeyringFile is where the gossip keyring persists (written 0600 on
	// every change; see keyring.go). When the file exists at New, its keys
	// are used and GossipKey only warns if it differs: the keyring records
	// rotations made with InstallKey/UseKey/RemoveKey, the key file an
	// operator gave once. When it does not exist, GossipKey seeds it.
	// Empty: keys live only in memory (tests).
	KeyringFile string

	// JoinAddrs are seed addresses ("host:port", or "host" for BindPort) to
	// join at Start. Listing this node's own address is harmless. Empty means
	// this node starts alone and others join it.
	JoinAddrs []string

	// JoinRetryInterval is the first delay between failed join attempts; the
	// delay doubles per attempt (with jitter) up to JoinMaxBackoff. Short
	// values make start-up converge faster when seeds start later; long ones
	// make less noise against a seed that is down for a while.
	JoinRetryInterval time.Duration

	// JoinMaxBackoff caps the delay between join attempts. Joining is retried
	// until it succeeds, the Start context ends, or Shutdown.
	JoinMaxBackoff time.Duration

	// BootstrapExpect is the number of servers that form the initial Raft
	// configuration (0 disables bootstrapping; see WaitBootstrapExpect and
	// doc.go). Every initial server must use the same value; nodes that
	// advertise a different value are not counted.
	BootstrapExpect int

	// LeaveTimeout bounds a graceful Leave when its context has no earlier
	// deadline: the time to spread the "leaving" meta and the leave message.
	// It also bounds how long Shutdown may wait for an interrupted Leave.
	LeaveTimeout time.Duration

	// DeadMemberRetention is how long a member that left or failed stays in
	// Members() (with status left or dead) before it is forgotten. It must
	// exceed the Raft reconciler's dead-server cleanup delay, so the
	// reconciler sees every departure.
	DeadMemberRetention time.Duration

	// Timings are the gossip protocol's intervals and multipliers. Production
	// uses LANTimings; tests use TestTimings (loopback, ~50-100 ms).
	Timings Timings

	// Logger receives the package's logs (component=membership) and
	// memberlist's own logs (component=memberlist). nil discards them.
	Logger *slog.Logger

	// JitterSource seeds the join backoff jitter; for tests, which inject a
	// seeded source to make delays reproducible. nil means a source seeded
	// from runtime randomness. A source must not be shared between nodes.
	JitterSource rand.Source
}

// Timings are the memberlist protocol timings plus this package's own
// bootstrap settle time. Field meanings follow memberlist.Config; the
// trade-off throughout is failure-detection speed and convergence against
// bandwidth and false suspicion on a loaded host.
type Timings struct {
	// ProbeInterval is how often each node probes one random peer.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for an ack (about the
	// network's 99th percentile RTT); must be below ProbeInterval.
	ProbeTimeout time.Duration
	// GossipInterval is how often each node gossips queued messages to
	// GossipNodes random peers.
	GossipInterval time.Duration
	// GossipNodes is the gossip fan-out per GossipInterval.
	GossipNodes int
	// PushPullInterval is how often a node syncs its full state with one
	// random peer over TCP (repairs anything gossip missed).
	PushPullInterval time.Duration
	// TCPTimeout bounds a TCP exchange (join, push/pull, fallback probe).
	TCPTimeout time.Duration
	// RetransmitMult: each gossip message is sent RetransmitMult*log(N+1) times.
	RetransmitMult int
	// SuspicionMult: a suspect is declared dead after
	// SuspicionMult*log10(N)*ProbeInterval (the minimum, reached with enough
	// independent confirmations).
	SuspicionMult int
	// SuspicionMaxTimeoutMult multiplies that minimum to give the timeout
	// used without confirmations.
	SuspicionMaxTimeoutMult int
	// GossipToTheDeadTime is how long dead nodes are still gossiped to (and
	// kept in memberlist's own table) so they can refute.
	GossipToTheDeadTime time.Duration
	// DeadNodeReclaimTime lets a dead node rejoin from a new address after
	// this long; 0 means only after memberlist forgets it.
	DeadNodeReclaimTime time.Duration
	// BootstrapSettle is how long the bootstrap server set must stay
	// unchanged before WaitBootstrapExpect returns it (see doc.go).
	BootstrapSettle time.Duration
}

// LANTimings returns memberlist's LAN defaults (memberlist.DefaultLANConfig)
// and a 2 s bootstrap settle time: a failure is detected in a few seconds
// on a LAN of tens of nodes.
func LANTimings() Timings {
	d := memberlist.DefaultLANConfig()
	return Timings{
		ProbeInterval:           d.ProbeInterval,
		ProbeTimeout:            d.ProbeTimeout,
		GossipInterval:          d.GossipInterval,
		GossipNodes:             d.GossipNodes,
		PushPullInterval:        d.PushPullInterval,
		TCPTimeout:              d.TCPTimeout,
		RetransmitMult:          d.RetransmitMult,
		SuspicionMult:           d.SuspicionMult,
		SuspicionMaxTimeoutMult: d.SuspicionMaxTimeoutMult,
		GossipToTheDeadTime:     d.GossipToTheDeadTime,
		DeadNodeReclaimTime:     d.DeadNodeReclaimTime,
		BootstrapSettle:         2 * time.Second,
	}
}

// TestTimings returns fast timings for tests on loopback: 100 ms probes,
// 50 ms gossip, failure detection in about a second. The suspicion
// multipliers stay at memberlist's defaults so a node starved of CPU (race
// detector, shared CI host) has time to refute before it is declared dead.
// Never use them across a real network: a probe timeout this short makes
// healthy peers look suspect.
func TestTimings() Timings {
	return Timings{
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            80 * time.Millisecond,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		PushPullInterval:        time.Second,
		TCPTimeout:              time.Second,
		RetransmitMult:          4,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 6,
		GossipToTheDeadTime:     2 * time.Second,
		DeadNodeReclaimTime:     200 * time.Millisecond,
		BootstrapSettle:         200 * time.Millisecond,
	}
}

// DefaultConfig returns production defaults: gossip on 0.0.0.0:7703 with
// LAN timings, a join retry starting at 1 s and backing off to 30 s, no
// bootstrap. NodeID, SystemID, Meta and GossipKey must still be set.
func DefaultConfig() Config {
	return Config{
		BindAddr:            "0.0.0.0",
		BindPort:            7703,
		Meta:                NodeMeta{Role: RoleServer},
		JoinRetryInterval:   time.Second,
		JoinMaxBackoff:      30 * time.Second,
		LeaveTimeout:        5 * time.Second,
		DeadMemberRetention: 24 * time.Hour,
		Timings:             LANTimings(),
	}
}

// Validate reports the first invalid field, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateIdentity, c.validateNetwork, c.validateJoin, c.validateMeta, c.Timings.validate} {
		if err := check(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

func (c Config) validateIdentity() error {
	if err := validateID(c.NodeID); err != nil {
		return fmt.Errorf("NodeID: %w", err)
	}
	if err := validateID(c.SystemID); err != nil {
		return fmt.Errorf("SystemID: %w", err)
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > maxBootstrapExpect {
		return fmt.Errorf("BootstrapExpect %d outside 0..%d", c.BootstrapExpect, maxBootstrapExpect)
	}
	switch {
	case c.LeaveTimeout <= 0:
		return fmt.Errorf("LeaveTimeout must be positive")
	case c.DeadMemberRetention <= 0:
		return fmt.Errorf("DeadMemberRetention must be positive")
	}
	return nil
}

func (c Config) validateNetwork() error {
	if net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("BindAddr %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return fmt.Errorf("BindPort %d out of range", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return fmt.Errorf("AdvertisePort %d out of range", c.AdvertisePort)
	}
	switch len(c.GossipKey) {
	case 16, 24, 32:
	case 0:
		if !c.AllowPlaintext && c.KeyringFile == "" {
			return fmt.Errorf("GossipKey is required unless AllowPlaintext or a KeyringFile is set")
		}
	default:
		return fmt.Errorf("GossipKey must be 16, 24 or 32 bytes, got %d", len(c.GossipKey))
	}
	return nil
}

func (c Config) validateJoin() error {
	for i, a := range c.JoinAddrs {
		if a == "" || strings.ContainsAny(a, " \t\r\n") {
			return fmt.Errorf("JoinAddrs[%d] %q is not an address", i, a)
		}
	}
	if c.JoinRetryInterval <= 0 {
		return fmt.Errorf("JoinRetryInterval must be positive")
	}
	if c.JoinMaxBackoff < c.JoinRetryInterval {
		return fmt.Errorf("JoinMaxBackoff %v is below JoinRetryInterval %v", c.JoinMaxBackoff, c.JoinRetryInterval)
	}
	return nil
}

// validateMeta checks the advertised fields and that the largest encoding
// (with every flag set) fits memberlist's limit, because memberlist
// panics on oversized meta instead of returning an error.
func (c Config) validateMeta() error {
	if err := c.Meta.validate(); err != nil {
		return fmt.Errorf("Meta: %w", err)
	}
	w := c.wireMeta()
	w.leaving, w.bootstrapped, w.draining = true, true, true
	w.bootID = strings.Repeat("0", bootIDLen)
	if n := len(encodeMeta(w)); n > memberlist.MetaMaxSize {
		return fmt.Errorf("encoded Meta is %d bytes, memberlist allows %d", n, memberlist.MetaMaxSize)
	}
	return nil
}

func (c Config) wireMeta() wireMeta {
	return wireMeta{
		nodeID:          c.NodeID,
		systemID:        c.SystemID,
		meta:            c.Meta,
		bootstrapExpect: c.BootstrapExpect,
	}
}

func (t Timings) validate() error {
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"ProbeInterval", t.ProbeInterval}, {"ProbeTimeout", t.ProbeTimeout},
		{"GossipInterval", t.GossipInterval}, {"PushPullInterval", t.PushPullInterval},
		{"TCPTimeout", t.TCPTimeout}, {"GossipToTheDeadTime", t.GossipToTheDeadTime},
		{"BootstrapSettle", t.BootstrapSettle},
	}
	for _, f := range durations {
		if f.d <= 0 {
			return fmt.Errorf("Timings.%s must be positive", f.name)
		}
	}
	if t.ProbeTimeout >= t.ProbeInterval {
		return fmt.Errorf("Timings.ProbeTimeout %v must be below ProbeInterval %v", t.ProbeTimeout, t.ProbeInterval)
	}
	if t.DeadNodeReclaimTime < 0 {
		return fmt.Errorf("Timings.DeadNodeReclaimTime must not be negative")
	}
	if t.GossipNodes < 1 || t.RetransmitMult < 1 || t.SuspicionMult < 1 || t.SuspicionMaxTimeoutMult < 1 {
		return fmt.Errorf("Timings multipliers and GossipNodes must be at least 1")
	}
	return nil
}

// apply copies the timings onto a memberlist config.
func (t Timings) apply(mc *memberlist.Config) {
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.GossipInterval = t.GossipInterval
	mc.GossipNodes = t.GossipNodes
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	mc.RetransmitMult = t.RetransmitMult
	mc.SuspicionMult = t.SuspicionMult
	mc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
}
