package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/acl"
	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/node/runs"
	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/raftstore"
)

// DefaultRaftMultiplier is the raft timing profile of DefaultConfig (see
// raftstore.Config.SetRaftMultiplier); re-exported so the CLI can show it
// without importing raftstore (STYLE.md §1: cmd -> node).
const DefaultRaftMultiplier = raftstore.DefaultRaftMultiplier

// ErrInvalidRaftConfig is matched (errors.Is) by a refused raft setting,
// such as a raft multiplier out of range.
var ErrInvalidRaftConfig = raftstore.ErrInvalidConfig

// Config configures one node. Start from DefaultConfig or DevConfig and
// override; every field is documented with its unit and trade-off.
type Config struct {
	// NodeID names this node in Raft and gossip; stable across restarts.
	NodeID string
	// SystemID names the system (cluster) this node belongs to.
	SystemID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string

	// HTTPAddr is the listen address of the MAP WebSocket endpoint and the
	// operational HTTP API (host:port; port 0 picks a free port).
	HTTPAddr string
	// RaftAddr is the listen address of the Raft TCP transport.
	RaftAddr string
	// RaftAdvertise is the Raft address other nodes dial; empty means the
	// bound RaftAddr (which must then not be a wildcard address).
	RaftAdvertise string

	// GRPCAddr is the listen address of the node-to-node gRPC service
	// (write forwarding, message relay, admin API for the CLI).
	GRPCAddr string
	// GRPCAdvertise is the gRPC address peers dial; empty means the bound
	// GRPCAddr.
	GRPCAdvertise string
	// GossipAddr is the memberlist (LAN gossip) bind address, host:port,
	// UDP and TCP.
	GossipAddr string
	// GossipAdvertise is the gossip address peers use; empty means the
	// bound address.
	GossipAdvertise string
	// Join lists gossip addresses of servers to join at start; joining is
	// retried with backoff until it succeeds.
	Join []string
	// GossipKey is the 16, 24 or 32-byte AES key that encrypts gossip.
	// Required on first start unless GossipPlaintext (which only --dev and
	// tests set). It seeds the keyring file in DataDir (KeyringFileName);
	// afterwards that file, changed by `concord keyring`, is authoritative
	// and a GossipKey that is not in it is ignored with a warning.
	GossipKey       []byte
	GossipPlaintext bool

	// TLS is the node's TLS material: the system CA and this node's server
	// certificate (concord tls cert create --server). With it gRPC and Raft
	// run mutual TLS between members, and HTTP serves https/wss when
	// HTTPTLS is set. Required unless Insecure.
	TLS tlsconf.Config
	// Insecure runs without TLS: every port plaintext and peers
	// unauthenticated. Only --insecure and --dev set it; it is logged
	// loudly at start.
	Insecure bool
	// HTTPTLS serves the HTTP/WebSocket port over TLS when TLS is set.
	HTTPTLS bool
	// HTTPClientAuth says whether the HTTP port asks for client
	// certificates: request (the default) accepts an operator certificate
	// as a credential while MAP clients need none; require refuses clients
	// without one.
	HTTPClientAuth tlsconf.ClientAuth
	// OperatorToken, when set, is accepted as an operator credential
	// (Authorization: Bearer on HTTP, gRPC metadata "authorization").
	// Read from a file or the environment, never a flag value.
	OperatorToken []byte
	// MetricsToken, when set, is accepted (Authorization: Bearer) for
	// GET /metrics only: a scraper's credential with no other power.
	MetricsToken []byte
	// OpenReads serves /metrics and the read-only GET /v1/* endpoints
	// (status, members, raft peers, placement, run files: what scrapers and
	// the web console read) without a credential, as MAP itself is open;
	// false requires a member's or an operator's credential for them.
	OpenReads bool

	// Bootstrap bootstraps a single-node Raft cluster on first start. A
	// node with existing Raft state ignores it.
	Bootstrap bool
	// BootstrapExpect, when > 0, bootstraps Raft once this many servers of
	// the system see each other through gossip, with the same server list
	// on every node, whatever order they start in. Every initial server
	// must use the same value. Mutually exclusive with Bootstrap.
	BootstrapExpect int

	// AllowedOrigins lists the browser origins (scheme://host[:port]) allowed
	// to open MAP connections (WebSocket /map and HTTP+SSE /map/*) besides
	// the node's own host and the HTTP addresses of the system's members
	// (the console fails over to them). "*" allows every origin. Requests
	// without an Origin header (non-browser clients) are always allowed:
	// the check stops web pages a user visits from driving a local node.
	AllowedOrigins []string

	// HTTPReadHeaderTimeout bounds reading a request's headers; HTTPIdleTimeout
	// closes a keep-alive connection idle for this long between requests.
	// Both stop idle sockets from piling up.
	HTTPReadHeaderTimeout time.Duration
	HTTPIdleTimeout       time.Duration

	// ReadyTimeout bounds how long Start waits for a leader and for the
	// local FSM to apply the log before returning an error.
	ReadyTimeout time.Duration
	// ShutdownTimeout bounds a graceful shutdown when the caller's context
	// has no deadline.
	ShutdownTimeout time.Duration
	// DrainTimeout is how long a drain (concord operator drain) waits for
	// the node's sessions to move to other nodes before it leaves anyway,
	// when the operator gives no --timeout.
	DrainTimeout time.Duration
	// DrainPromotionTimeout bounds a drained voter's separate wait, once
	// its sessions moved or DrainTimeout passed, for the autopilot to
	// promote a replacement and demote it, so the voters stay at the
	// target during a slow promotion; when the operator gives no
	// --promotion-timeout.
	DrainPromotionTimeout time.Duration

	// Version is reported by map/connect systemInfo and /v1/health.
	Version string

	// EnableDebug mounts /debug/pprof on the HTTP port. Off by default:
	// profiles and the process's command line are for operators only, so
	// when on it is served by debugHandler, an admin surface to protect
	// like the admin API.
	EnableDebug bool

	// Raft, RPC, Registry and MAP configure the sub-components. Their identity
	// and address fields are filled from the fields above by New.
	Raft     raftstore.Config
	RPC      rpc.Config
	Registry registry.Config
	MAP      mapsvc.Config
	// Runs and RunService configure replicated consensus runs (the "runs"
	// module, the leader's driver and the x-concord/runs/* methods).
	Runs       runs.Config
	RunService runs.ServiceConfig
	// Membership and Cluster configure gossip and the node-to-node gRPC
	// layer (timings, reconciler policy: DeadServerCleanupDelay,
	// MinQuorum). Identity and addresses are filled from the fields above.
	Membership membership.Config
	Cluster    cluster.Config
	// ACL configures participant authentication: the anonymous policy and
	// bearer (JWT) verification. API keys live in Raft (acl.Module), so
	// ACL.Keys is set by New.
	ACL acl.Config
	// Federation configures links to other systems (timings, TLS seam,
	// Plaintext for --dev). Identity is filled from the fields above.
	Federation federation.Config

	// GRPCDialer, for tests / fault injection: dials peers' gRPC
	// addresses instead of plain TCP. nil dials TCP.
	GRPCDialer func(ctx context.Context, addr string) (net.Conn, error)

	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns production defaults. NodeID and DataDir must still
// be set.
func DefaultConfig() Config {
	return Config{
		SystemID:              "default",
		HTTPAddr:              "0.0.0.0:7700",
		RaftAddr:              "0.0.0.0:7702",
		ReadyTimeout:          30 * time.Second,
		ShutdownTimeout:       10 * time.Second,
		DrainTimeout:          2 * time.Minute,
		DrainPromotionTimeout: time.Minute,
		HTTPReadHeaderTimeout: 10 * time.Second,
		HTTPIdleTimeout:       90 * time.Second,
		Version:               Version,
		Raft:                  raftstore.DefaultConfig(),
		RPC:                   rpc.DefaultConfig(),
		Registry:              registry.DefaultConfig(),
		MAP:                   mapsvc.DefaultConfig(),
		Runs:                  runs.DefaultConfig(),
		RunService:            runs.DefaultServiceConfig(),
		Membership:            membership.DefaultConfig(),
		Cluster:               cluster.DefaultConfig(),
		ACL:                   acl.DefaultConfig(),
		Federation:            federation.DefaultConfig(),
		GRPCAddr:              "0.0.0.0:7701",
		GossipAddr:            "0.0.0.0:7703",
		HTTPTLS:               true,
		HTTPClientAuth:        tlsconf.ClientAuthRequest,
		OpenReads:             true,
	}
}

// DevConfig returns a single bootstrapped node on 127.0.0.1 with free ports,
// keeping data in dataDir: what `concord server --dev` and tests start.
func DevConfig(dataDir string) Config {
	c := DefaultConfig()
	c.NodeID = "dev-1"
	c.SystemID = "dev"
	c.DataDir = dataDir
	c.HTTPAddr = "127.0.0.1:0"
	c.RaftAddr = "127.0.0.1:0"
	c.GRPCAddr = "127.0.0.1:0"
	c.GossipAddr = "127.0.0.1:0"
	c.GossipPlaintext = true
	c.Federation.Plaintext = true // dev links run without TLS
	c.Insecure = true             // loopback only; tests set TLS instead
	c.Bootstrap = true
	// A dev node lets anonymous agents and clients in; system and gateway
	// participants still need a credential.
	c.ACL.AnonymousTypes = []string{"agent", "client"}
	c.ReadyTimeout = 10 * time.Second
	// A single voter elects itself after one election timeout: keep it short
	// so a dev node is ready in well under a second.
	c.Raft.HeartbeatTimeout = 200 * time.Millisecond
	c.Raft.ElectionTimeout = 200 * time.Millisecond
	c.Raft.LeaderLeaseTimeout = 100 * time.Millisecond
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("node: NodeID is required")
	case c.SystemID == "":
		return errors.New("node: SystemID is required")
	case c.DataDir == "":
		return errors.New("node: DataDir is required")
	case c.HTTPAddr == "":
		return errors.New("node: HTTPAddr is required")
	case c.RaftAddr == "":
		return errors.New("node: RaftAddr is required")
	case c.GRPCAddr == "":
		return errors.New("node: GRPCAddr is required")
	case c.GossipAddr == "":
		return errors.New("node: GossipAddr is required")
	case c.Bootstrap && c.BootstrapExpect > 0:
		return errors.New("node: Bootstrap and BootstrapExpect are mutually exclusive")
	case c.BootstrapExpect < 0:
		return errors.New("node: BootstrapExpect must not be negative")
	case len(c.GossipKey) == 0 && !c.GossipPlaintext && !HasKeyring(c.DataDir):
		return errors.New("node: GossipKey is required (16, 24 or 32 bytes) on first start, unless GossipPlaintext is set")
	case !c.TLS.Enabled() && !c.Insecure:
		return errors.New("node: TLS material is required (CA, certificate and key: concord tls ca create / cert create) unless Insecure is set")
	case c.ReadyTimeout <= 0:
		return errors.New("node: ReadyTimeout must be positive")
	case c.ShutdownTimeout <= 0:
		return errors.New("node: ShutdownTimeout must be positive")
	case c.DrainTimeout <= 0 || c.DrainPromotionTimeout <= 0:
		return errors.New("node: DrainTimeout and DrainPromotionTimeout must be positive")
	case c.HTTPReadHeaderTimeout <= 0 || c.HTTPIdleTimeout <= 0:
		return errors.New("node: HTTPReadHeaderTimeout and HTTPIdleTimeout must be positive")
	}
	if err := c.Cluster.ValidatePolicy(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := c.RPC.Validate(); err != nil {
		return fmt.Errorf("node: rpc config: %w", err)
	}
	if err := c.ACL.Validate(); err != nil {
		return fmt.Errorf("node: acl config: %w", err)
	}
	if err := c.Registry.Validate(); err != nil {
		return fmt.Errorf("node: registry config: %w", err)
	}
	return nil
}

// Version is the binary's version, set at build time with
// -ldflags "-X github.com/concordmap/concord/node.Version=...".
var Version = "0.1.0-dev"

// KeyringFileName is the gossip keyring's file in the data dir (0600).
const KeyringFileName = "gossip-keyring.json"

// HasKeyring reports whether dataDir holds a gossip keyring, which makes
// GossipKey optional on later starts (and gossip encrypted).
func HasKeyring(dataDir string) bool {
	if dataDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(dataDir, KeyringFileName))
	return err == nil
}
