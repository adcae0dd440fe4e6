package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a snapshot file and print its index, term, size, versions and per-module record counts",
		Long: `Verify a snapshot file (checksum, file and stream format versions, every
record's framing) and print its index, term, size, versions, when and by which
node it was saved, and each module's record count by kind (agents, scopes,
sessions, events, runs, links, API keys, ...). A corrupt, truncated or
newer-format file exits 1 with the reason. It reads only the file: no node is
contacted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := backup.Inspect(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeInfoJSON(cmd.OutOrStdout(), info)
			}
			return backup.WriteInfo(cmd.OutOrStdout(), info)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the file's description as one JSON object")
	return cmd
}

// snapshotInfoJSON is the --json form of concord snapshot inspect.
type snapshotInfoJSON struct {
	Index         uint64             `json:"index"`
	Term          uint64             `json:"term"`
	Size          int64              `json:"size"`
	FileVersion   uint32             `json:"fileVersion"`
	FormatVersion uint32             `json:"formatVersion"`
	Created       *time.Time         `json:"created"` // null when unknown
	NodeID        string             `json:"nodeId"`
	SystemID      string             `json:"systemId"`
	Version       string             `json:"version"`
	Modules       []moduleRecordJSON `json:"modules"`
}

type moduleRecordJSON struct {
	Name    string `json:"name"`
	Records int    `json:"records"`
	// Kinds counts the records by kind (agent, session, run, ...).
	Kinds map[string]int `json:"kinds,omitempty"`
}

func writeInfoJSON(w io.Writer, info backup.Info) error {
	out := snapshotInfoJSON{Index: info.Index, Term: info.Term, Size: info.Size, FileVersion: info.FileVersion,
		FormatVersion: info.FormatVersion, NodeID: info.NodeID, SystemID: info.SystemID, Version: info.Version,
		Modules: []moduleRecordJSON{}}
	if !info.Created.IsZero() {
		c := info.Created.UTC()
		out.Created = &c
	}
	for _, m := range info.Modules {
		mj := moduleRecordJSON{Name: m.Name, Records: m.Records}
		for _, k := range m.Kinds {
			if mj.Kinds == nil {
				mj.Kinds = map[string]int{}
			}
			mj.Kinds[k.Kind] = k.Records
		}
		out.Modules = append(out.Modules, mj)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
