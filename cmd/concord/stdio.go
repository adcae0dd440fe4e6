package main

import (
	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/stdio"
)

type stdioFlags struct {
	conn     connFlags
	maxFrame int64
	noResume bool
}

func newStdioCmd() *cobra.Command {
	var f stdioFlags
	cmd := &cobra.Command{
		Use:   "stdio",
		Short: "Bridge a subprocess agent speaking MAP NDJSON on stdin/stdout to the system",
		Long: `Relay MAP JSON-RPC between this process's stdin/stdout (one JSON message per
line, as MAP's stdio transport) and a node's WebSocket endpoint. Run it as the
child of an agent that speaks MAP over stdio; logs go to stderr only.

Lines longer than --max-frame-bytes or that are not JSON get the same JSON-RPC
error the node would send; the bridge keeps running.

When the connection drops, requests still waiting for an answer are answered
with error -32603 (details.reason "connection_lost": they may or may not have
been applied) and the bridge connects to the next --server URL (with backoff,
up to --reconnect-timeout). It then replays the agent's last successful
map/connect with its sessionId and resumeToken (unless --no-resume), and writes
an ` + stdio.ReconnectedMethod + ` notification: params.reconnected true means the
session, its agents and subscriptions were restored (use a grace-period or
orphan disconnect policy so the agents survive the gap); false means the agent
must send map/connect, register and subscribe again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStdio(cmd, &f) },
	}
	f.conn.register(cmd)
	d := stdio.DefaultConfig()
	cmd.Flags().Int64Var(&f.maxFrame, "max-frame-bytes", d.MaxFrameBytes, "longest stdin line forwarded (keep equal to the nodes' limit)")
	cmd.Flags().BoolVar(&f.noResume, "no-resume", false, "do not replay map/connect after a reconnect (the agent resumes itself)")
	return cmd
}

func runStdio(cmd *cobra.Command, f *stdioFlags) error {
	log, err := f.conn.logs.logger()
	if err != nil {
		return err
	}
	cfg := stdio.DefaultConfig()
	cfg.URLs = f.conn.urls()
	if cfg.TLSConfig, err = f.conn.tls.config(); err != nil {
		return err
	}
	cfg.ConnectTimeout = f.conn.connectTimeout
	cfg.ReconnectTimeout = f.conn.reconnectTimeout
	cfg.MaxFrameBytes = f.maxFrame
	cfg.Resume = !f.noResume
	cfg.Logger = log
	b, err := stdio.NewBridge(cfg)
	if err != nil {
		return err
	}
	return b.Run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
}
