package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "concord",
		Short:         "Concord: a federated cluster of MAP (Multi-Agent Protocol) nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServerCmd(), newVersionCmd(), newMembersCmd(), newRaftCmd(), newKeygenCmd(), newKeyringCmd(), newTLSCmd(), newFederationCmd(), newACLCmd())
	root.AddCommand(newSnapshotCmd(), newHealthCmd(), newOperatorCmd())
	root.AddCommand(newArgueCmd(), newAgentCmd(), newStdioCmd(), newBenchCmd())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command group (snapshot, operator,
// raft, ...) fail on an argument that is none of its subcommands. Cobra
// only does so for the root: `concord snapshot sve backup.snap` printed
// the group's help and exited 0, so a script's typo passed for a backup.
// A group given no argument still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c == c.Root() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // cobra's default for the root
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		return fmt.Errorf("%s (run '%s --help' for its commands)", msg, cmd.CommandPath())
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "concord %s (%s, %s/%s)\n",
				node.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// logFlags are shared by every long-running subcommand.
type logFlags struct {
	level  string
	format string
}

func (f *logFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.level, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&f.format, "log-format", "text", "log format: text or json")
}

func (f *logFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format: want text or json, got %q", f.format)
	}
}
