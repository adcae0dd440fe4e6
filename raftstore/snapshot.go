package raftstore

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// snapshotFormatVersion is bumped only when the framing (header + records)
// changes, not when a module changes its own record contents.
const snapshotFormatVersion = 1

// maxRecordBytes bounds one length-delimited message in a snapshot stream,
// so a corrupt length prefix fails cleanly instead of allocating wildly.
// Modules write one record per entity, far below this.
const maxRecordBytes = 256 << 20

var readOpts = protodelim.UnmarshalOptions{MaxSize: maxRecordBytes}

// namedSnapshot is one module's captured view.
type namedSnapshot struct {
	name string
	snap ModuleSnapshot
}

// fsmSnapshot is the FSM's point-in-time view: every module's captured view
// plus the position they correspond to.
type fsmSnapshot struct {
	header *concordv1.SnapshotHeader
	parts  []namedSnapshot
}

// Snapshot implements raft.FSM. It runs on raft's FSM goroutine, so no
// Apply runs concurrently: each module only captures (copy or immutable
// pointer) and all encoding happens later in Persist.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	s := &fsmSnapshot{header: &concordv1.SnapshotHeader{
		FormatVersion: snapshotFormatVersion,
		LastIndex:     f.applied.Load(),
		LastTerm:      f.appliedTerm.Load(),
	}}
	for _, m := range f.modules {
		ms, err := m.Snapshot()
		if err != nil {
			s.Release()
			return nil, fmt.Errorf("snapshot module %q: %w", m.Name(), err)
		}
		s.parts = append(s.parts, namedSnapshot{name: m.Name(), snap: ms})
		s.header.Modules = append(s.header.Modules, m.Name())
	}
	return s, nil
}

// Persist implements raft.FSMSnapshot: header, then each module's records
// followed by its end marker. It ends with sink.Close on success and
// sink.Cancel on any error, so a half-written snapshot is never kept.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	bw := bufio.NewWriterSize(sink, 64<<10)
	err := s.write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot sink: %w", err)
	}
	return nil
}

func (s *fsmSnapshot) write(w io.Writer) error {
	if _, err := protodelim.MarshalTo(w, s.header); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	for _, p := range s.parts {
		rec := &concordv1.SnapshotRecord{Module: p.name}
		err := p.snap.Persist(func(data []byte) error {
			rec.Data = data
			_, err := protodelim.MarshalTo(w, rec)
			return err
		})
		if err != nil {
			return fmt.Errorf("persist module %q: %w", p.name, err)
		}
		end := &concordv1.SnapshotRecord{Module: p.name, End: true}
		if _, err := protodelim.MarshalTo(w, end); err != nil {
			return fmt.Errorf("write end of module %q: %w", p.name, err)
		}
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {
	for _, p := range s.parts {
		p.snap.Release()
	}
}

// Restore implements raft.FSM. Every module decodes into new state first;
// only when all of them succeeded are their commit functions called, so a
// bad snapshot leaves the live state exactly as it was.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer func() { _ = rc.Close() }()
	br := bufio.NewReaderSize(rc, 64<<10)

	var hdr concordv1.SnapshotHeader
	if err := readOpts.UnmarshalFrom(br, &hdr); err != nil {
		return fmt.Errorf("%w: header: %w", ErrBadSnapshot, err)
	}
	if hdr.FormatVersion != snapshotFormatVersion {
		return fmt.Errorf("%w: format version %d, want %d", ErrBadSnapshot, hdr.FormatVersion, snapshotFormatVersion)
	}
	seen := make(map[string]bool, len(hdr.Modules))
	for _, name := range hdr.Modules {
		if _, ok := f.byName[name]; !ok {
			return fmt.Errorf("%w: unknown module %q", ErrBadSnapshot, name)
		}
		if seen[name] {
			return fmt.Errorf("%w: module %q listed twice", ErrBadSnapshot, name)
		}
		seen[name] = true
	}

	commits := make([]func(), 0, len(f.modules))
	for _, name := range hdr.Modules {
		rr := &recordReader{r: br, module: name}
		commit, err := f.byName[name].Restore(rr.next)
		if err == nil && !rr.ended {
			err = fmt.Errorf("%w: module did not read all its records", ErrBadSnapshot)
		}
		if err != nil {
			return fmt.Errorf("restore module %q: %w", name, err)
		}
		commits = append(commits, commit)
	}
	// A module added after the snapshot was written starts empty.
	for _, m := range f.modules {
		if seen[m.Name()] {
			continue
		}
		commit, err := m.Restore(func() ([]byte, error) { return nil, io.EOF })
		if err != nil {
			return fmt.Errorf("restore empty module %q: %w", m.Name(), err)
		}
		commits = append(commits, commit)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing data after last module", ErrBadSnapshot)
	}

	for _, commit := range commits {
		if commit != nil {
			commit()
		}
	}
	f.advance(hdr.LastIndex, hdr.LastTerm, nil, false)
	f.log.Info("restored snapshot", "index", hdr.LastIndex, "term", hdr.LastTerm)
	return nil
}

// recordReader hands one module its records and stops at its end marker.
type recordReader struct {
	r      *bufio.Reader
	module string
	ended  bool
}

func (rr *recordReader) next() ([]byte, error) {
	if rr.ended {
		return nil, io.EOF
	}
	var rec concordv1.SnapshotRecord
	if err := readOpts.UnmarshalFrom(rr.r, &rec); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the end marker is missing
		}
		return nil, fmt.Errorf("%w: module %q: %w", ErrBadSnapshot, rr.module, err)
	}
	if rec.Module != rr.module {
		return nil, fmt.Errorf("%w: record of module %q inside module %q", ErrBadSnapshot, rec.Module, rr.module)
	}
	if rec.End {
		rr.ended = true
		return nil, io.EOF
	}
	return rec.Data, nil
}
