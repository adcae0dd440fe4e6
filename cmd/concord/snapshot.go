package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/concordmap/concord/node/backup"
)

// snapshotTimeout is the default deadline of save and restore: a large
// state takes a while to stream.
const snapshotTimeout = 5 * time.Minute

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up and restore the replicated state of a system",
		Long: `Back up and restore the replicated state of a system (agents, scopes,
sessions, consensus runs, ...). Save and restore talk to any node's gRPC port;
a follower passes the call to the leader.`,
	}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotRestoreCmd(), newSnapshotInspectCmd())
	return cmd
}

// registerLong is register with the longer snapshot deadline as default.
func (f *adminFlags) registerLong(cmd *cobra.Command) {
	f.register(cmd)
	f.timeout = snapshotTimeout
	cmd.Flags().Lookup("timeout").DefValue = snapshotTimeout.String()
}

func newSnapshotSaveCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent snapshot of the leader's state into FILE",
		Long: `Save a consistent snapshot of the leader's state into FILE. The snapshot holds
every write acknowledged before the command started; writes go on meanwhile.
FILE is written atomically (a temporary file, verified, then renamed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.callConn(cmd.Context(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
				info, err := backup.Save(ctx, cc, args[0])
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "saved snapshot at index %d (term %d, %d bytes) to %s\n",
					info.Index, info.Term, info.Size, args[0])
				return err
			})
		},
	}
	f.registerLong(cmd)
	return cmd
}

func newSnapshotRestoreCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole state of the system with the snapshot in FILE",
		Long: `Replace the whole state of the system with the snapshot in FILE, on every node.
The file is verified (checksum, format versions, every module decodes) before
anything changes: a corrupt file or one from a newer concord is refused and
the system keeps its state. Writes made while the restore runs are lost.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.callConn(cmd.Context(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
				res, err := backup.Restore(ctx, cc, args[0])
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored snapshot of index %d (term %d); in effect from log index %d\n",
					res.Info.Index, res.Info.Term, res.Index)
				return err
			})
		},
	}
	f.registerLong(cmd)
	return cmd
}

func newSnapshotInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a snapshot file and print its index, term, size, versions and per-module record counts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := backup.Inspect(args[0])
			if err != nil {
				return err
			}
			return backup.WriteInfo(cmd.OutOrStdout(), info)
		},
	}
}
