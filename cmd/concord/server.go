package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/acl"
)

// serverFlags map 1:1 onto node.Config fields.
type serverFlags struct {
	dev           bool
	nodeID        string
	systemID      string
	dataDir       string
	httpAddr      string
	raftAddr      string
	raftAdvertise string
	bootstrap     bool
	maxFrameBytes int64
	allowOrigins  []string
	anonymous     []string
	anonRate      float64
	anonBurst     int
	jwksFile      string
	roleFile      string
	jwksURL       string
	jwksCAFile    string
	jwksRefresh   time.Duration
	jwtIssuer     string
	jwtAudience   string

	grpcAddr        string
	grpcAdvertise   string
	gossipAddr      string
	gossipAdvertise string
	join            []string
	bootstrapExpect int
	gossipKeyFile   string
	// gossipKeyArg is the removed --gossip-key: set only to refuse it.
	gossipKeyArg    string
	deadCleanup     time.Duration
	detachGrace     time.Duration
	minQuorum       int
	raftVoters      int
	drainTimeout    time.Duration
	drainPromotion  time.Duration
	stabilization   time.Duration
	lastContact     time.Duration
	maxTrailing     uint64
	nonvoterPace    time.Duration
	nonvoterBgPace  time.Duration
	leaveOnShutdown bool
	raftMultiplier  int
	runRetention    time.Duration
	maxFinishedRuns int
	enableDebug     bool
	maxLogEntries   uint64
	logs            logFlags
	tls             serverTLSFlags
	configFile      string
	printConfig     bool
	// changed reports whether the user set a flag, so --dev keeps its own
	// defaults for everything not given explicitly.
	changed func(name string) bool
}

func newServerCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Concord node",
		Long: `Run a Concord node. With --dev it runs one bootstrapped node on 127.0.0.1
with a temporary data dir, ready in about a second (MAP at ws://127.0.0.1:7700/map).

Outside --dev a node needs TLS material (--tls-ca-file, --tls-cert-file,
--tls-key-file; see concord tls) and a gossip key, or an explicit --insecure.
SIGHUP reloads the CA, certificate and key without a restart.

Every flag can also come from the environment, CONCORD_<FLAG> (upper case,
dashes to underscores: CONCORD_NODE_ID, CONCORD_JOIN=a:7703,b:7703), or from a
YAML file given with --config whose keys are flag names. Flags win over the
environment, which wins over the file; --print-config shows the result.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sources, err := applySources(cmd.Flags(), os.LookupEnv)
			if err != nil {
				return err
			}
			if err := refuseURLCredentialsOnArgv(cmd.Flags(), sources); err != nil {
				return err
			}
			f.changed = cmd.Flags().Changed
			for _, w := range envTypos(cmd.Flags(), os.Environ()) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			if f.printConfig {
				var dev map[string]override
				if f.dev {
					dev = f.devSettings()
				}
				if err := printConfig(cmd.OutOrStdout(), cmd.Flags(), sources, dev); err != nil {
					return err
				}
				if err := printSecretEnv(cmd.OutOrStdout(), os.LookupEnv); err != nil {
					return err
				}
				return printValidity(cmd.OutOrStdout(), f)
			}
			return runServer(cmd.Context(), cmd, f)
		},
	}
	f.bind(cmd)
	return cmd
}

// bind registers the server flags on cmd, writing into f.
func (f *serverFlags) bind(cmd *cobra.Command) {
	d := node.DefaultConfig()
	fl := cmd.Flags()
	fl.BoolVar(&f.dev, "dev", false, "run one node on 127.0.0.1 with a temporary data dir, bootstrapped")
	fl.StringVar(&f.nodeID, "node-id", "", "stable node id (required unless --dev)")
	fl.StringVar(&f.systemID, "system-id", d.SystemID, "id of the system (cluster) this node belongs to")
	fl.StringVar(&f.dataDir, "data-dir", "", "directory for the Raft log, stable store and snapshots (required unless --dev)")
	fl.StringVar(&f.httpAddr, "http-addr", d.HTTPAddr, "listen address for MAP (ws /map) and the HTTP API")
	fl.StringVar(&f.raftAddr, "raft-addr", d.RaftAddr, "listen address for the Raft transport")
	fl.StringVar(&f.raftAdvertise, "raft-advertise", "", "Raft address other nodes dial (default: --raft-addr)")
	fl.BoolVar(&f.bootstrap, "bootstrap", false, "bootstrap a single-node cluster on first start")
	fl.StringVar(&f.grpcAddr, "grpc-addr", d.GRPCAddr, "listen address for node-to-node gRPC (forwarding, relay, admin)")
	fl.StringVar(&f.grpcAdvertise, "grpc-advertise", "", "gRPC address peers dial (default: --grpc-addr)")
	fl.StringVar(&f.gossipAddr, "gossip-addr", d.GossipAddr, "listen address for LAN gossip (UDP and TCP)")
	fl.StringVar(&f.gossipAdvertise, "gossip-advertise", "", "gossip address peers use (default: --gossip-addr)")
	fl.StringSliceVar(&f.join, "join", nil, "gossip addresses of servers to join (comma separated; retried with backoff)")
	fl.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "bootstrap Raft once this many servers see each other (every initial server uses the same value)")
	fl.StringVar(&f.gossipKeyFile, "gossip-key-file", "",
		"file holding the base64 gossip encryption key, 16/24/32 bytes (or set "+gossipKeyEnv+"; required unless --dev; see concord keygen). "+
			"Used on first start: afterwards the keyring in the data dir (see concord keyring) is authoritative")
	fl.StringVar(&f.gossipKeyArg, "gossip-key", "", "removed: use --gossip-key-file or "+gossipKeyEnv)
	_ = fl.MarkHidden("gossip-key")
	fl.DurationVar(&f.deadCleanup, "dead-server-cleanup", d.Cluster.DeadServerCleanupDelay, "remove a dead server from Raft after this long")
	fl.DurationVar(&f.detachGrace, "session-detach-grace", d.Cluster.SessionDetachGrace,
		"how long a node must stay failed in gossip before the leader moves its MAP sessions off it (clients resume elsewhere); "+
			"rides out a live node falsely declared failed under load. A node that left is not waited for; 0 detaches at once. "+
			"Also how long a node waits before detaching a session the state shows connected to it with no connection (restored snapshot, restart)")
	fl.IntVar(&f.minQuorum, "min-quorum", d.Cluster.MinQuorum, "never shrink the Raft voters below this many (dead-server cleanup, autopilot demotions, drains unless --force)")
	fl.IntVar(&f.raftVoters, "raft-voters", d.Cluster.RaftVoters,
		"number of Raft voters the system keeps, 3 or 5, the same on every server: further servers join as non-voters (replicate and serve, do not vote); "+
			"the leader promotes the healthiest non-voter when a voter fails or leaves and demotes extras when it returns")
	fl.DurationVar(&f.stabilization, "server-stabilization-time", d.Cluster.ServerStabilizationTime,
		"how long a non-voter must have been healthy before the leader promotes it to voter")
	fl.DurationVar(&f.lastContact, "last-contact-threshold", d.Cluster.LastContactThreshold,
		"a server that has not heard from the leader for longer is unhealthy (concord operator health; not promoted)")
	fl.Uint64Var(&f.maxTrailing, "max-trailing-logs", d.Cluster.MaxTrailingLogs,
		"a server whose Raft log trails the leader's by more entries is unhealthy (concord operator health; not promoted)")
	fl.DurationVar(&f.nonvoterPace, "nonvoter-replication-interval", d.Raft.NonvoterReplicationInterval,
		"on the leader: a non-voter whose client waits for an entry (a read of its own write, a write it answers itself) gets one append at once, "+
			"and further waits it does not cover one per this interval; with the background interval off, every non-voter gets one append per this interval under steady writes; 0 replicates to non-voters like to voters")
	fl.DurationVar(&f.nonvoterBgPace, "nonvoter-background-interval", d.Raft.NonvoterBackgroundInterval,
		"on the leader: under steady writes start one log append per this interval to a non-voter none of whose clients waits (its subscribers' events and reads "+
			"lag by up to this under steady writes; fewer, larger appends cost it less CPU per write); at most --nonvoter-replication-interval turns it off")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", d.DrainTimeout, "how long concord operator drain waits for this node's sessions to move before it leaves anyway")
	fl.DurationVar(&f.drainPromotion, "drain-promotion-timeout", d.DrainPromotionTimeout,
		"then, when this node votes, how long the drain waits for the autopilot to promote a replacement before it leaves while still a voter")
	fl.BoolVar(&f.leaveOnShutdown, "leave-on-shutdown", false, "leave the cluster (removed from Raft at once) instead of a restartable stop")
	fl.IntVar(&f.raftMultiplier, "raft-multiplier", node.DefaultRaftMultiplier,
		"scale Raft timings from a LAN base, 1 to 10: heartbeat/election = N x 100 ms, leader lease N x 50 ms (at least 100 ms), commit N x 10 ms. "+
			"1 fails over in a few hundred ms on a dedicated low-latency LAN; the default 5 in about a second; raise it for WAN links or overloaded hosts. Every server should use the same value")
	fl.DurationVar(&f.runRetention, "run-retention", d.RunService.FinishedRetention,
		"how long a finished consensus run stays readable (argue get/list/watch) before the leader forgets it; 0 keeps runs by age")
	fl.IntVar(&f.maxFinishedRuns, "max-finished-runs", d.RunService.MaxFinishedRuns,
		"keep at most this many finished runs (the oldest are forgotten first); 0 means no cap")
	fl.Int64Var(&f.maxFrameBytes, "max-frame-bytes", d.RPC.MaxFrameBytes, "largest MAP frame accepted, in bytes")
	fl.StringSliceVar(&f.anonymous, "allow-anonymous", nil,
		"participant types (agent, client) that may connect without a credential (auth method none); default none, --dev: agent,client. system and gateway always need one")
	fl.Float64Var(&f.anonRate, "anonymous-session-rate", d.MAP.AnonymousSessionRate,
		"new sessions per second an anonymous participant may open on this node from one client IP (IPv6: one /64), beyond --anonymous-session-burst; "+
			"past it map/connect gets a retryable 4001. Authenticated participants and resumes are not counted; 0 means no limit")
	fl.IntVar(&f.anonBurst, "anonymous-session-burst", d.MAP.AnonymousSessionBurst,
		"new anonymous sessions one client IP may open at once before --anonymous-session-rate applies")
	fl.StringVar(&f.jwksFile, "jwt-jwks-file", "",
		"JWKS file of the token issuer's public keys: enables bearer (JWT, RS256/ES256/EdDSA) authentication; re-read when it changes and on SIGHUP")
	fl.StringVar(&f.jwksURL, "jwt-jwks-url", "",
		"https URL of the issuer's JWKS (instead of --jwt-jwks-file): fetched at start, every --jwt-jwks-refresh, on SIGHUP and on an unknown kid (at most every 30s)")
	fl.StringVar(&f.jwksCAFile, "jwt-jwks-ca-file", "", "PEM CA bundle trusted for --jwt-jwks-url (default: the system roots)")
	fl.DurationVar(&f.jwksRefresh, "jwt-jwks-refresh", acl.DefaultJWKSRefresh, "how often --jwt-jwks-url is re-fetched")
	fl.StringVar(&f.jwtIssuer, "jwt-issuer", "", "required iss of bearer tokens (with --jwt-jwks-file or --jwt-jwks-url)")
	fl.StringVar(&f.jwtAudience, "jwt-audience", "", "required aud of bearer tokens (with --jwt-jwks-file or --jwt-jwks-url)")
	fl.StringVar(&f.roleFile, "role-permissions-file", "",
		"YAML or JSON file of rolePermissions (role -> canSee/canMessage/acceptsFrom rules), merged under each agent's permissionOverrides; load the same file on every node")
	fl.StringSliceVar(&f.allowOrigins, "allow-origin", nil,
		"browser origins (scheme://host:port) allowed to open MAP connections besides this node's host and the system's members; \"*\" allows any")
	fl.BoolVar(&f.enableDebug, "enable-debug", false, "serve /debug/pprof on the HTTP port (profiles and the command line: an operator-only surface)")
	fl.Uint64Var(&f.maxLogEntries, "max-log-entries", d.Raft.MaxLogEntries,
		"snapshot as soon as this many Raft log entries were written since the last snapshot, bounding the log (and the memory its mapped file takes) whatever the write rate; "+
			"lower snapshots more often, 0 leaves it to the 2-minute snapshot timer")
	f.tls.bind(fl)
	f.logs.register(cmd)
	fl.StringVar(&f.configFile, configFlag, "",
		"YAML file of server settings, keys = flag names (env CONCORD_CONFIG); flags win over CONCORD_<FLAG> environment variables, which win over the file")
	fl.BoolVar(&f.printConfig, printConfigFlag, false, "print the effective settings (flags, environment, file) as a config file, secrets redacted, and exit (status 1 if a start would refuse them)")
}

func runServer(ctx context.Context, cmd *cobra.Command, f serverFlags) error {
	log, err := f.logs.logger()
	if err != nil {
		return err
	}
	cfg, cleanup, err := f.config()
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.Logger = log
	srv, err := node.New(cfg)
	if err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	if err := srv.Start(startCtx); err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "concord node %s ready: MAP %s, HTTP %s\n", cfg.NodeID, srv.MAPURL(), srv.HTTPURL())
	stopReload := reloadOnHangup(srv, log)
	defer stopReload()
	drained := false
	var fatal error
	select {
	case <-ctx.Done():
	case <-srv.Drained(): // concord operator drain: the node already left
		drained = true
	case <-srv.Fatal(): // e.g. its FSM halted: a build below the system's FSM level
		fatal = srv.FatalErr()
	}
	fmt.Fprintln(cmd.OutOrStdout(), "shutting down")
	shCtx, shCancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer shCancel()
	if fatal != nil {
		_ = srv.Shutdown(shCtx)
		return fmt.Errorf("node stopped: %w", fatal)
	}
	if f.leaveOnShutdown && !drained {
		return srv.Leave(shCtx)
	}
	return srv.Shutdown(shCtx)
}

// devAddrs are the listen addresses of a --dev node (flags not given).
var devAddrs = map[string]string{
	"http-addr": "127.0.0.1:7700", "grpc-addr": "127.0.0.1:7701",
	"raft-addr": "127.0.0.1:7702", "gossip-addr": "127.0.0.1:7703",
}

// config turns flags into a node.Config. With --dev, unset identity and
// addresses get loopback defaults and a temporary data dir that cleanup
// removes.
func (f serverFlags) config() (node.Config, func(), error) {
	cleanup := func() {}
	cfg := node.DefaultConfig()
	if f.dev {
		dir := f.dataDir
		if dir == "" {
			tmp, err := os.MkdirTemp("", "concord-dev-")
			if err != nil {
				return cfg, cleanup, fmt.Errorf("create dev data dir: %w", err)
			}
			dir = tmp
			cleanup = func() { _ = os.RemoveAll(tmp) }
		}
		cfg = node.DevConfig(dir)
		cfg.HTTPAddr, cfg.GRPCAddr = devAddrs["http-addr"], devAddrs["grpc-addr"]
		cfg.RaftAddr, cfg.GossipAddr = devAddrs["raft-addr"], devAddrs["gossip-addr"]
		cfg.ReadyTimeout = 10 * time.Second
	}
	apply := func(flag string, dst *string, v string) {
		if !f.dev || f.changed(flag) {
			*dst = v
		}
	}
	apply("node-id", &cfg.NodeID, f.nodeID)
	apply("system-id", &cfg.SystemID, f.systemID)
	apply("data-dir", &cfg.DataDir, f.dataDir)
	apply("http-addr", &cfg.HTTPAddr, f.httpAddr)
	apply("raft-addr", &cfg.RaftAddr, f.raftAddr)
	apply("raft-advertise", &cfg.RaftAdvertise, f.raftAdvertise)
	apply("grpc-addr", &cfg.GRPCAddr, f.grpcAddr)
	apply("grpc-advertise", &cfg.GRPCAdvertise, f.grpcAdvertise)
	apply("gossip-addr", &cfg.GossipAddr, f.gossipAddr)
	apply("gossip-advertise", &cfg.GossipAdvertise, f.gossipAdvertise)
	cfg.Join = f.join
	cfg.BootstrapExpect = f.bootstrapExpect
	cfg.Cluster.DeadServerCleanupDelay = f.deadCleanup
	if f.detachGrace < 0 {
		return cfg, cleanup, fmt.Errorf("--session-detach-grace %s: must not be negative", f.detachGrace)
	}
	cfg.Cluster.SessionDetachGrace = f.detachGrace
	cfg.Cluster.MinQuorum = f.minQuorum
	cfg.DrainTimeout = f.drainTimeout
	cfg.DrainPromotionTimeout = f.drainPromotion
	if f.raftVoters != 3 && f.raftVoters != 5 {
		return cfg, cleanup, fmt.Errorf("--raft-voters %d: use 3 or 5 (the same on every server)", f.raftVoters)
	}
	if f.minQuorum > f.raftVoters {
		return cfg, cleanup, fmt.Errorf("--min-quorum %d exceeds --raft-voters %d", f.minQuorum, f.raftVoters)
	}
	if f.minQuorum < 1 {
		return cfg, cleanup, fmt.Errorf("--min-quorum %d: use 1 up to --raft-voters (%d)", f.minQuorum, f.raftVoters)
	}
	if f.deadCleanup <= 0 {
		return cfg, cleanup, fmt.Errorf("--dead-server-cleanup %s: must be positive", f.deadCleanup)
	}
	if f.drainTimeout <= 0 {
		return cfg, cleanup, fmt.Errorf("--drain-timeout %s: must be positive", f.drainTimeout)
	}
	if f.drainPromotion <= 0 {
		return cfg, cleanup, fmt.Errorf("--drain-promotion-timeout %s: must be positive", f.drainPromotion)
	}
	cfg.Cluster.RaftVoters = f.raftVoters
	if f.stabilization <= 0 || f.lastContact <= 0 {
		return cfg, cleanup, fmt.Errorf("--server-stabilization-time and --last-contact-threshold must be positive")
	}
	cfg.Cluster.ServerStabilizationTime, cfg.Cluster.LastContactThreshold, cfg.Cluster.MaxTrailingLogs = f.stabilization, f.lastContact, f.maxTrailing
	if f.changed("gossip-key") {
		return cfg, cleanup, fmt.Errorf("--gossip-key: %w (they show in ps and /debug/pprof/cmdline): "+
			"put the key in a file readable only by the server and pass --gossip-key-file, or set %s", errSecretOnCommandLine, gossipKeyEnv)
	}
	key, err := readGossipKey(f.gossipKeyFile)
	if err != nil {
		return cfg, cleanup, err
	}
	if key != nil {
		cfg.GossipKey = key
	}
	if f.bootstrapExpect > 0 {
		cfg.Bootstrap = false // --dev bootstraps alone unless told to expect peers
	}
	cfg.Bootstrap = cfg.Bootstrap || f.bootstrap
	cfg.RPC.MaxFrameBytes = f.maxFrameBytes
	cfg.AllowedOrigins = f.allowOrigins
	if !f.dev || f.changed("allow-anonymous") {
		cfg.ACL.AnonymousTypes = f.anonymous
	}
	cfg.MAP.AnonymousSessionRate, cfg.MAP.AnonymousSessionBurst = f.anonRate, f.anonBurst
	switch {
	case f.jwksFile != "" && f.jwksURL != "":
		return cfg, cleanup, fmt.Errorf("--jwt-jwks-file and --jwt-jwks-url exclude each other")
	case f.jwksCAFile != "" && f.jwksURL == "":
		return cfg, cleanup, fmt.Errorf("--jwt-jwks-ca-file needs --jwt-jwks-url")
	case f.jwksFile != "" || f.jwksURL != "":
		if f.jwtIssuer == "" || f.jwtAudience == "" {
			return cfg, cleanup, fmt.Errorf("--jwt-jwks-file/--jwt-jwks-url need --jwt-issuer and --jwt-audience")
		}
		cfg.ACL.JWT = &acl.JWTConfig{JWKSFile: f.jwksFile, JWKSURL: f.jwksURL, JWKSCAFile: f.jwksCAFile,
			JWKSRefresh: f.jwksRefresh, Issuer: f.jwtIssuer, Audience: f.jwtAudience, Leeway: 30 * time.Second}
	}
	if f.roleFile != "" {
		if cfg.Registry.RolePermissions, err = readRolePermissions(f.roleFile); err != nil {
			return cfg, cleanup, err
		}
	}
	cfg.EnableDebug = f.enableDebug
	cfg.Raft.MaxLogEntries = f.maxLogEntries
	if f.nonvoterPace < 0 || f.nonvoterPace > time.Second {
		return cfg, cleanup, fmt.Errorf("--nonvoter-replication-interval %s: use 0 (off) up to 1s", f.nonvoterPace)
	}
	cfg.Raft.NonvoterReplicationInterval = f.nonvoterPace
	if f.nonvoterBgPace < 0 || f.nonvoterBgPace > time.Second {
		return cfg, cleanup, fmt.Errorf("--nonvoter-background-interval %s: use 0 (off) up to 1s", f.nonvoterBgPace)
	}
	cfg.Raft.NonvoterBackgroundInterval = f.nonvoterBgPace
	cfg.RunService.FinishedRetention, cfg.RunService.MaxFinishedRuns = f.runRetention, f.maxFinishedRuns
	// --dev keeps DevConfig's quick single-node timings unless asked.
	if !f.dev || f.changed("raft-multiplier") {
		if err := cfg.Raft.SetRaftMultiplier(f.raftMultiplier); err != nil {
			return cfg, cleanup, fmt.Errorf("--raft-multiplier: %w", err)
		}
	}
	if !f.dev && (cfg.NodeID == "" || cfg.DataDir == "") {
		return cfg, cleanup, fmt.Errorf("--node-id and --data-dir are required (or use --dev)")
	}
	if err := f.tls.apply(&cfg, f.dev); err != nil {
		return cfg, cleanup, err
	}
	return cfg, cleanup, nil
}
