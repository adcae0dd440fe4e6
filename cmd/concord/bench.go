package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/benchload"
	"github.com/concordmap/concord/node/rpc"
)

// benchFlags are shared by the bench subcommands.
type benchFlags struct {
	urls       []string
	jsonOut    bool
	duration   time.Duration
	tls        clientTLSFlags
	authMethod string
	cpuProfile string
}

func (f *benchFlags) register(cmd *cobra.Command, withDuration bool) {
	cmd.Flags().StringArrayVar(&f.urls, "url", []string{"ws://127.0.0.1:7700/map"}, "MAP WebSocket URL of a node (repeat for several nodes)")
	cmd.Flags().BoolVar(&f.jsonOut, "json", false, "print the summary as one JSON object")
	f.tls.bind(cmd.Flags())
	// The bench participants' MAP credential is --credential-file, as for
	// `concord argue`. The client TLS flags also bring --token-file (the
	// operator token elsewhere); here it is a deprecated alias of
	// --credential-file, both setting the same field.
	cmd.Flags().StringVar(&f.tls.tokenFile, "credential-file", os.Getenv("CONCORD_CREDENTIAL_FILE"),
		"file holding the MAP credential the bench participants connect with: an API key "+
			"(concord acl token create; it must allow ids bench-* and types agent for write/send, client for sessions) or a bearer JWT "+
			"(env CONCORD_CREDENTIAL_FILE); without it they connect anonymously")
	_ = cmd.Flags().MarkDeprecated("token-file", "use --credential-file")
	cmd.Flags().StringVar(&f.cpuProfile, "cpu-profile", "", "write the load generator's own CPU profile (go tool pprof) to this file: it shares the machine with the nodes")
	cmd.Flags().StringVar(&f.authMethod, "auth-method", "", "auth method of --credential-file: api-key or bearer (default: api-key for a map_sk_ key, else bearer)")
	if withDuration {
		cmd.Flags().DurationVar(&f.duration, "duration", 10*time.Second, "how long to generate load")
	}
}

// report prints the summary: JSON with --json, else one field per line.
func (f *benchFlags) report(w io.Writer, res any) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode summary: %w", err)
	}
	if f.jsonOut {
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("decode summary: %w", err)
	}
	b, err = json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return fmt.Errorf("encode summary: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// runLoad sets the TLS configuration (wss:// with --ca-file) on rpcCfg and
// the credential (--credential-file) on auth, runs one load with the command's
// context and prints its summary.
func runLoad[T any](cmd *cobra.Command, f *benchFlags, rpcCfg *rpc.ClientConfig, auth *benchload.Credential, load func(context.Context) (T, error)) error {
	tlsCfg, err := f.tls.config()
	if err != nil {
		return err
	}
	rpcCfg.TLSConfig = tlsCfg
	switch f.authMethod {
	case "", "api-key", "bearer":
	default:
		return fmt.Errorf("--auth-method must be api-key or bearer, not %q", f.authMethod)
	}
	tok, err := f.tls.token()
	if err != nil {
		return fmt.Errorf("--token-file: %w", err)
	}
	*auth = benchload.Credential{Method: f.authMethod, Token: tok}
	stop, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	res, err := load(cmd.Context())
	if perr := stop(); err == nil && perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	return f.report(cmd.OutOrStdout(), res)
}

// startCPUProfile profiles this process into path until the returned stop
// runs ("" profiles nothing).
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		return nil
	}, nil
}

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a running node or cluster (write, sessions, send)",
		Long: "Load generators for any Concord nodes: a progress line on stderr each second,\n" +
			"a summary on stdout at the end (--json for scripts).",
	}
	cmd.AddCommand(newBenchWriteCmd(), newBenchSessionsCmd(), newBenchSendCmd())
	return cmd
}

func newBenchWriteCmd() *cobra.Command {
	var f benchFlags
	cfg := benchload.DefaultWriteConfig()
	cmd := &cobra.Command{
		Use:   "write",
		Short: "Committed writes: clients each update their own agent (map/agents/update), 1 in flight",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.URLs, cfg.Duration, cfg.Progress = f.urls, f.duration, cmd.ErrOrStderr()
			return runLoad(cmd, &f, &cfg.RPC, &cfg.Auth, func(ctx context.Context) (benchload.WriteResult, error) { return benchload.Write(ctx, cfg) })
		},
	}
	f.register(cmd, true)
	cmd.Flags().IntVar(&cfg.Clients, "clients", cfg.Clients, "connections, spread round-robin over the URLs")
	return cmd
}

func newBenchSessionsCmd() *cobra.Command {
	var f benchFlags
	cfg := benchload.DefaultSessionsConfig()
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Open N idle sessions; report the connect rate and the nodes' memory (RSS) with them open",
		Long: `Open N idle sessions; report the connect rate and the nodes' memory (RSS) with them open.

All sessions come from this host's address. Without --credential-file they are anonymous,
and a node admits at most --anonymous-session-burst of them at once from one address, then
--anonymous-session-rate a second (defaults 200, then 20/s): the rest fail with 4001 and
are counted in errors (first_error says why). Give the participants a credential, or start
the nodes with a higher --anonymous-session-rate/--anonymous-session-burst (0 rate: no limit)
for a throwaway benchmark system.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.URLs, cfg.Progress = f.urls, cmd.ErrOrStderr()
			return runLoad(cmd, &f, &cfg.RPC, &cfg.Auth, func(ctx context.Context) (benchload.SessionsResult, error) { return benchload.Sessions(ctx, cfg) })
		},
	}
	f.register(cmd, false)
	cmd.Flags().IntVar(&cfg.Sessions, "sessions", cfg.Sessions, "idle sessions to open")
	cmd.Flags().IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "connects under way at once")
	cmd.Flags().DurationVar(&cfg.Settle, "settle", cfg.Settle, "idle time before the nodes' memory is read")
	return cmd
}

func newBenchSendCmd() *cobra.Command {
	var f benchFlags
	cfg := benchload.DefaultSendConfig()
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Pairs of agents, pipelined map/send: msgs/s, latency, loss, duplicates, reordering",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.URLs, cfg.Duration, cfg.Progress = f.urls, f.duration, cmd.ErrOrStderr()
			return runLoad(cmd, &f, &cfg.RPC, &cfg.Auth, func(ctx context.Context) (benchload.SendResult, error) { return benchload.Send(ctx, cfg) })
		},
	}
	f.register(cmd, true)
	cmd.Flags().IntVar(&cfg.Pairs, "pairs", cfg.Pairs, "sender/receiver pairs (receiver on the next URL)")
	cmd.Flags().IntVar(&cfg.Size, "size", cfg.Size, "payload bytes per message")
	cmd.Flags().IntVar(&cfg.Window, "window", cfg.Window, "unanswered map/send requests per sender")
	return cmd
}
