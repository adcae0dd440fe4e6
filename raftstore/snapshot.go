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
	if err := f.halt.cause(); err != nil {
		return nil, fmt.Errorf("no snapshot of a halted FSM: %w", err)
	}
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
	d, err := f.decode(rc)
	if errors.Is(err, ErrHalt) {
		f.log.Error("FSM halted restoring a snapshot: this build cannot apply the log; stop the node and run a build that can", "err", err)
		f.halt.set(err)
	}
	if err != nil {
		return err
	}
	for _, commit := range d.commits {
		if commit != nil {
			commit()
		}
	}
	f.advance(d.header.LastIndex, d.header.LastTerm, nil, false)
	f.log.Info("restored snapshot", "index", d.header.LastIndex, "term", d.header.LastTerm)
	return nil
}

// decoded is a snapshot stream decoded into fresh module state that is not
// live yet: calling every commit swaps it in.
type decoded struct {
	header  *concordv1.SnapshotHeader
	commits []func()
	records map[string]int // records per module, for inspection
}

// decode reads a whole snapshot stream into brand-new module state without
// touching the live state. Restore commits the result; a user restore
// (backup.go) decodes first only to refuse a bad file before raft sees it.
func (f *fsm) decode(r io.Reader) (*decoded, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	hdr, err := readStreamHeader(br)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(hdr.Modules))
	for _, name := range hdr.Modules {
		if _, ok := f.byName[name]; !ok {
			return nil, fmt.Errorf("%w: unknown module %q", ErrBadSnapshot, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: module %q listed twice", ErrBadSnapshot, name)
		}
		seen[name] = true
	}

	d := &decoded{header: hdr, commits: make([]func(), 0, len(f.modules)), records: map[string]int{}}
	for _, name := range hdr.Modules {
		rr := &recordReader{r: br, module: name}
		commit, err := f.byName[name].Restore(rr.next)
		if err == nil && !rr.ended {
			err = fmt.Errorf("%w: module did not read all its records", ErrBadSnapshot)
		}
		if err != nil && !errors.Is(err, ErrBadSnapshot) {
			// The module refused its records (its own format version,
			// a record that does not decode): bad for this binary.
			err = fmt.Errorf("%w: %w", ErrBadSnapshot, err)
		}
		if err != nil {
			return nil, fmt.Errorf("restore module %q: %w", name, err)
		}
		d.commits = append(d.commits, commit)
		d.records[name] = rr.count
	}
	// A module added after the snapshot was written starts empty.
	for _, m := range f.modules {
		if seen[m.Name()] {
			continue
		}
		commit, err := m.Restore(func() ([]byte, error) { return nil, io.EOF })
		if err != nil {
			return nil, fmt.Errorf("restore empty module %q: %w", m.Name(), err)
		}
		d.commits = append(d.commits, commit)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after last module", ErrBadSnapshot)
	}
	return d, nil
}

// readStreamHeader reads and checks the header of a snapshot stream.
func readStreamHeader(br *bufio.Reader) (*concordv1.SnapshotHeader, error) {
	var hdr concordv1.SnapshotHeader
	if err := readOpts.UnmarshalFrom(br, &hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrBadSnapshot, err)
	}
	if hdr.FormatVersion != snapshotFormatVersion {
		return nil, &VersionError{What: "snapshot stream format", Got: hdr.FormatVersion, Max: snapshotFormatVersion}
	}
	return &hdr, nil
}

// recordReader hands one module its records and stops at its end marker.
type recordReader struct {
	r      *bufio.Reader
	module string
	ended  bool
	count  int // records read before the end marker
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
	rr.count++
	return rec.Data, nil
}
