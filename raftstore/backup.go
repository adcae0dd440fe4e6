package raftstore

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Operator backups (`concord snapshot save|restore`). A backup is a snapshot
// file (snapfile.go) wrapping the same FSM stream raft persists, so a
// restore goes through raft's own user-restore path: the leader installs it
// as a snapshot at a fresh index and every follower receives it through
// InstallSnapshot, decoding into new state and swapping it in (fsm.Restore).

// SaveOptions label a saved snapshot; they are informative only.
type SaveOptions struct {
	// SystemID and Version name the system and the binary that saved it.
	SystemID, Version string
}

// SaveSnapshot writes a snapshot file of the current state to w. Only the
// leader saves (others get *NotLeaderError or ErrNoLeader): it first commits
// a NOOP so the snapshot holds every write acknowledged before the call,
// then has raft take a snapshot and streams it. Safe to call from any
// goroutine; writes continue meanwhile.
func (s *Store) SaveSnapshot(ctx context.Context, w io.Writer, opts SaveOptions) (SnapshotInfo, error) {
	if err := s.enter(); err != nil {
		return SnapshotInfo{}, err
	}
	defer s.leave()
	if s.raft.State() != raft.Leader {
		return SnapshotInfo{}, s.notLeader()
	}
	if _, _, err := s.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "snapshot save barrier"}); err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot save barrier: %w", err)
	}
	var fut raft.SnapshotFuture
	err := s.awaitWithCtx(ctx, func(time.Duration) raft.Future { fut = s.raft.Snapshot(); return fut })
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("take snapshot: %w", err)
	}
	meta, rc, err := fut.Open()
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("open snapshot: %w", err)
	}
	defer func() { _ = rc.Close() }()
	hdr := &concordv1.SnapshotFileHeader{
		Index: meta.Index, Term: meta.Term, Size: meta.Size,
		CreatedUnixMs: time.Now().UnixMilli(), NodeId: s.id,
		SystemId: opts.SystemID, Version: opts.Version,
	}
	if err := writeSnapshotFile(w, hdr, rc); err != nil {
		return SnapshotInfo{}, err
	}
	info := infoFromHeader(hdr)
	info.FormatVersion = snapshotFormatVersion
	return info, nil
}

// RestoreSnapshot replaces the whole replicated state with the snapshot
// file read from r. Only the leader restores. The file is spooled into
// DataDir and checked completely (checksum, versions, every module decodes
// into fresh state) before raft sees it, so a bad file changes nothing;
// raft's Restore would crash the node on a stream the FSM refuses. Then
// raft installs it at a new index, followers install it from the leader,
// and a NOOP is committed so every replica's applied index moves past the
// restore. restoredIndex is that NOOP's index.
//
// The check holds a second, decoded copy of the state in memory for a
// moment. Writes proposed meanwhile may be lost: the restore replaces them.
func (s *Store) RestoreSnapshot(ctx context.Context, r io.Reader) (info SnapshotInfo, restoredIndex uint64, err error) {
	if err := s.enter(); err != nil {
		return info, 0, err
	}
	defer s.leave()
	if s.raft.State() != raft.Leader {
		return info, 0, s.notLeader()
	}
	f, err := os.CreateTemp(s.cfg.DataDir, "restore-*.snap")
	if err != nil {
		return info, 0, fmt.Errorf("spool snapshot: %w", err)
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	if _, err := io.Copy(f, r); err != nil {
		return info, 0, fmt.Errorf("spool snapshot: %w", err)
	}

	// Pass 1: verify everything without touching live state.
	if info, err = s.checkSnapshotFile(f); err != nil {
		return info, 0, err
	}
	// Pass 2: hand the stream to raft.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return info, 0, fmt.Errorf("rewind snapshot: %w", err)
	}
	ctx, cancel := s.withDefaultTimeout(ctx)
	defer cancel()
	timeout, err := enqueueTimeout(ctx)
	if err != nil {
		return info, 0, err
	}
	_, err = readSnapshotFile(f, func(hdr *concordv1.SnapshotFileHeader, stream io.Reader) error {
		meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: hdr.Index, Term: hdr.Term, Size: hdr.Size}
		return s.translate(s.raft.Restore(meta, stream, timeout))
	})
	if err != nil {
		return info, 0, fmt.Errorf("restore snapshot: %w", err)
	}
	s.log.Warn("replaced the replicated state with a snapshot", "index", info.Index, "term", info.Term)
	_, idx, err := s.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "after snapshot restore"})
	if err != nil {
		return info, 0, fmt.Errorf("commit after restore: %w", err)
	}
	return info, idx, nil
}

// checkSnapshotFile reads f from its start and decodes its stream into
// throw-away module state, returning what it holds.
func (s *Store) checkSnapshotFile(f *os.File) (SnapshotInfo, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return SnapshotInfo{}, fmt.Errorf("rewind snapshot: %w", err)
	}
	var modules []ModuleRecords
	var format uint32
	hdr, err := readSnapshotFile(f, func(_ *concordv1.SnapshotFileHeader, stream io.Reader) error {
		d, err := s.fsm.decode(stream)
		if err != nil {
			return err
		}
		format = d.header.FormatVersion
		for _, name := range d.header.Modules {
			modules = append(modules, ModuleRecords{Name: name, Records: d.records[name]})
		}
		return nil
	})
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("check snapshot: %w", err)
	}
	info := infoFromHeader(hdr)
	info.FormatVersion, info.Modules = format, modules
	return info, nil
}
