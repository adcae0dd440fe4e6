package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/argueclient"
	"github.com/concordmap/concord/node/client/mapclient"
)

// defaultServer is the MAP endpoint of `concord server --dev`.
const defaultServer = "ws://127.0.0.1:7700/map"

// defaultTLSServer is the MAP endpoint of node1 of `make cluster`, used
// when a CA is given (--ca-file or CONCORD_CA_FILE).
const defaultTLSServer = "wss://127.0.0.1:7700/map"

// connFlags are the connection flags of the client subcommands.
type connFlags struct {
	servers          []string
	connectTimeout   time.Duration
	reconnectTimeout time.Duration
	logs             logFlags
	tls              clientTLSFlags
	credentialFile   string
}

func (f *connFlags) register(cmd *cobra.Command) {
	def := []string{defaultServer}
	if os.Getenv("CONCORD_CA_FILE") != "" {
		def = []string{defaultTLSServer}
	}
	if env := os.Getenv("CONCORD_SERVER"); env != "" {
		def = strings.Split(env, ",")
	}
	cmd.PersistentFlags().StringSliceVar(&f.servers, "server", def,
		"MAP URLs of the system's nodes, comma separated, tried in order (env CONCORD_SERVER; default "+defaultTLSServer+" with --ca-file)")
	cmd.PersistentFlags().DurationVar(&f.connectTimeout, "connect-timeout", 10*time.Second,
		"how long to try the servers before giving up on the first connection (0: wait forever)")
	cmd.PersistentFlags().DurationVar(&f.reconnectTimeout, "reconnect-timeout", 2*time.Minute,
		"how long to keep trying the servers after the connection is lost")
	cmd.PersistentFlags().StringVar(&f.logs.level, "log-level", "warn", "log level: debug, info, warn, error")
	cmd.PersistentFlags().StringVar(&f.logs.format, "log-format", "text", "log format: text or json")
	cmd.PersistentFlags().StringVar(&f.credentialFile, "credential-file", os.Getenv("CONCORD_CREDENTIAL_FILE"),
		"file holding the MAP credential sent in map/connect: an API key (map_sk_..., concord acl token create) or a bearer token (env CONCORD_CREDENTIAL_FILE, or the value itself in CONCORD_CREDENTIAL)")
	f.tls.bind(cmd.PersistentFlags())
}

// credential reads the MAP credential (--credential-file, else
// CONCORD_CREDENTIAL); nil when none is given. An API key is recognised
// by its prefix; anything else is a bearer token.
func (f *connFlags) credential() (*mapclient.Auth, error) {
	tok := os.Getenv("CONCORD_CREDENTIAL")
	if f.credentialFile != "" {
		b, err := os.ReadFile(f.credentialFile)
		if err != nil {
			return nil, fmt.Errorf("read --credential-file: %w", err)
		}
		tok = string(b)
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return nil, nil
	}
	if strings.HasPrefix(tok, "map_sk_") {
		return &mapclient.Auth{Method: "api-key", Token: tok}, nil
	}
	return &mapclient.Auth{Method: "bearer", Token: tok}, nil
}

// urls returns the MAP URLs to try: with --ca-file and the default URL
// untouched, the TLS default.
func (f *connFlags) urls() []string {
	if f.tls.enabled() && len(f.servers) == 1 && f.servers[0] == defaultServer {
		return []string{defaultTLSServer}
	}
	return f.servers
}

func (f *connFlags) client() (mapclient.Config, error) {
	log, err := f.logs.logger()
	if err != nil {
		return mapclient.Config{}, err
	}
	cfg := mapclient.DefaultConfig()
	cfg.URLs = f.urls()
	if cfg.Auth, err = f.credential(); err != nil {
		return cfg, err
	}
	if cfg.RPC.TLSConfig, err = f.tls.config(); err != nil {
		return cfg, err
	}
	cfg.ReconnectTimeout = f.reconnectTimeout
	cfg.Logger = log
	return cfg, cfg.Validate()
}

func (f *connFlags) remote(cmd *cobra.Command, out string, quiet bool) (argueclient.Remote, error) {
	cfg, err := f.client()
	if err != nil {
		return argueclient.Remote{}, err
	}
	r := argueclient.Remote{Client: cfg, Follow: argueclient.DefaultFollowConfig(), OutDir: out,
		ConnectTimeout: f.connectTimeout}
	if !quiet {
		r.Progress = argueclient.NewProgress(cmd.OutOrStdout())
	}
	return r, nil
}

func newArgueCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "argue",
		Short: "Run and inspect consensus debates (runs) on a Concord system",
	}
	conn.register(cmd)
	cmd.AddCommand(newArgueRunCmd(&conn), newArgueGetCmd(&conn), newArgueListCmd(&conn),
		newArgueWatchCmd(&conn), newArgueCancelCmd(&conn))
	return cmd
}

type argueRunFlags struct {
	spec     argueclient.RequestSpec
	out      string
	local    bool
	clock    string
	script   string
	quiet    bool
	minR     int64
	maxR     int64
	thresh   float64
	perTask  time.Duration
	perRound time.Duration
	deadline time.Duration
}

func newArgueRunCmd(conn *connFlags) *cobra.Command {
	var f argueRunFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Start a debate and follow it to the end",
		Long: `Start a consensus run with the given agents as participants, print one line
per engine event while it runs, and write events.jsonl, result.json and
summary.md under --out/<requestId>/. The exit status is non-zero when the run
failed or was cancelled.

With --local the run happens in this process (no server) with persona agents
(or --script answers) and, by default, the engine's virtual clock: answers
arrive in dispatch order and timers fire instantly in virtual time, so the run
is deterministic and immediate. --clock wall uses real time and concurrency.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runArgueRun(cmd, conn, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.spec.Task, "task", "", "the question or task to debate")
	fl.StringSliceVar(&f.spec.Agents, "agents", nil, "participant agent ids, comma separated (at least 2); SYSTEM:agent:ID names an agent of a linked system (dc2:agent:bob)")
	fl.StringVar(&f.spec.Input, "input", "", "start request JSON file (argue's shape); flags override its fields")
	fl.StringVar(&f.spec.RequestID, "request-id", "", "request id (default: from --input, else generated)")
	fl.Int64Var(&f.minR, "min-rounds", 0, "minimum debate rounds")
	fl.Int64Var(&f.maxR, "max-rounds", 0, "maximum debate rounds")
	fl.Float64Var(&f.thresh, "threshold", 0, "claim acceptance threshold in [0,1]")
	fl.StringVar(&f.spec.Composer, "composer", "", "report composer: builtin or representative")
	fl.StringVar(&f.spec.Representative, "representative", "", "participant that composes the report")
	fl.StringVar(&f.spec.Action, "action", "", "prompt of an action step run after the debate")
	fl.BoolVar(&f.spec.IncludeFullInAct, "action-full-result", false, "give the actor the full result")
	fl.DurationVar(&f.perTask, "per-task-timeout", 0, "how long one agent answer may take")
	fl.DurationVar(&f.perRound, "per-round-timeout", 0, "how long one round may take")
	fl.DurationVar(&f.deadline, "global-deadline", 0, "how long the whole run may take")
	fl.StringVar(&f.out, "out", "./out", "artifact directory (files go to <out>/<requestId>/)")
	fl.BoolVar(&f.local, "local", false, "run in process with persona agents, no server")
	fl.StringVar(&f.clock, "clock", "virtual", "--local clock: virtual (deterministic, instant) or wall")
	fl.StringVar(&f.script, "script", "", "--local answers file (consensus answers script) instead of personas")
	fl.BoolVar(&f.quiet, "quiet", false, "no live progress output")
	return cmd
}

func runArgueRun(cmd *cobra.Command, conn *connFlags, f *argueRunFlags) error {
	changed := cmd.Flags().Changed
	if changed("min-rounds") {
		f.spec.MinRounds = &f.minR
	}
	if changed("max-rounds") {
		f.spec.MaxRounds = &f.maxR
	}
	if changed("threshold") {
		f.spec.Threshold = &f.thresh
	}
	if changed("per-task-timeout") {
		f.spec.PerTaskTimeout = &f.perTask
	}
	if changed("per-round-timeout") {
		f.spec.PerRoundTimeout = &f.perRound
	}
	if changed("global-deadline") {
		f.spec.GlobalDeadline = &f.deadline
	}
	if !f.local && (changed("script") || changed("clock")) {
		return fmt.Errorf("--script and --clock only apply with --local")
	}
	raw, req, err := f.spec.Build()
	if err != nil {
		return err
	}
	var oc *argueclient.Outcome
	if f.local {
		oc, err = runArgueLocal(cmd, conn, f, argueclient.LocalOptions{Request: req, OutDir: f.out})
	} else {
		var r argueclient.Remote
		if r, err = conn.remote(cmd, f.out, f.quiet); err != nil {
			return err
		}
		oc, err = r.Run(cmd.Context(), raw, req.RequestID)
	}
	if oc != nil && oc.Dir != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "run %s %s; files in %s\n", oc.RunID, oc.Status, oc.Dir)
	}
	return err
}

func runArgueLocal(cmd *cobra.Command, conn *connFlags, f *argueRunFlags, opts argueclient.LocalOptions) (*argueclient.Outcome, error) {
	switch f.clock {
	case "virtual":
	case "wall":
		opts.WallClock = true
	default:
		return nil, fmt.Errorf("--clock: want virtual or wall, got %q", f.clock)
	}
	if f.script != "" {
		var err error
		if opts.Script, err = argueclient.LoadScript(f.script); err != nil {
			return nil, fmt.Errorf("--script: %w", err)
		}
	}
	if !f.quiet {
		opts.Progress = argueclient.NewProgress(cmd.OutOrStdout())
	}
	log, err := conn.logs.logger()
	if err != nil {
		return nil, err
	}
	opts.Logger = log
	return argueclient.RunLocal(cmd.Context(), opts)
}

func newArgueGetCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	var include []string
	var out string
	cmd := &cobra.Command{
		Use:   "get <runId>",
		Short: "Show a run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := conn.remote(cmd, out, true)
			if err != nil {
				return err
			}
			c, err := r.Dial(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close(cmd.Context()) }()
			if out != "" {
				include = append(include, "result", "events")
			}
			info, err := argueclient.Runs{C: c}.Get(cmd.Context(), args[0], dedupe(include)...)
			if err != nil {
				return err
			}
			if out != "" {
				if info.Status == argueclient.StatusRunning {
					return fmt.Errorf("run %s is still running: no files written (use watch --out)", info.RunID)
				}
				oc, err := info.Outcome(out)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "files in %s\n", oc.Dir)
			}
			if asJSON {
				return writeJSON(cmd, info.Raw)
			}
			return argueclient.WriteRun(cmd.OutOrStdout(), info)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run object as JSON")
	cmd.Flags().StringSliceVar(&include, "include", nil, "extra parts for --json: result, events, state")
	cmd.Flags().StringVar(&out, "out", "", "write the finished run's files under this directory")
	return cmd
}

func newArgueListCmd(conn *connFlags) *cobra.Command {
	var status, cursor string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := conn.remote(cmd, "", true)
			if err != nil {
				return err
			}
			c, err := r.Dial(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close(cmd.Context()) }()
			runs, next, err := argueclient.Runs{C: c}.List(cmd.Context(), status, limit, cursor)
			if err != nil {
				return err
			}
			if asJSON {
				b, err := json.Marshal(map[string]any{"runs": runs, "nextCursor": next})
				if err != nil {
					return err
				}
				return writeJSON(cmd, b)
			}
			return argueclient.WriteRunList(cmd.OutOrStdout(), runs, next)
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only runs with this status: running, finished, failed, cancelled")
	cmd.Flags().IntVar(&limit, "limit", 0, "page size (default: the server's)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after this run id (from a previous page)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newArgueWatchCmd(conn *connFlags) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "watch <runId>",
		Short: "Follow a run's events until it is over",
		Long: `Print a run's events so far, then follow it live until it finishes. The exit
status is non-zero when the run failed or was cancelled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := conn.remote(cmd, out, false)
			if err != nil {
				return err
			}
			oc, err := r.Watch(cmd.Context(), args[0])
			if oc != nil {
				msg := fmt.Sprintf("run %s %s", oc.RunID, oc.Status)
				if oc.Dir != "" {
					msg += "; files in " + oc.Dir
				}
				fmt.Fprintln(cmd.OutOrStdout(), msg)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "also write the run's files under this directory")
	return cmd
}

func newArgueCancelCmd(conn *connFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel <runId>",
		Short: "Cancel a running run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := conn.remote(cmd, "", true)
			if err != nil {
				return err
			}
			c, err := r.Dial(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close(cmd.Context()) }()
			s, err := argueclient.Runs{C: c}.Cancel(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s\n", s.RunID, s.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the run)")
	return cmd
}

// writeJSON prints raw JSON indented, keeping the server's member order.
func writeJSON(cmd *cobra.Command, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := cmd.OutOrStdout().Write(b.Bytes())
	return err
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	out := xs[:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
