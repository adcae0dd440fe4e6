package raftstore

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// A snapshot file, as `concord snapshot save` writes it:
//
//	magic     8 bytes  "CNCDSNAP"
//	version   2 bytes  big-endian file version (snapshotFileVersion)
//	header    length-delimited SnapshotFileHeader (index, term, size, labels)
//	stream    header.size bytes: the FSM snapshot stream (snapshot.go), which
//	          carries its own format version
//	checksum  32 bytes SHA-256 of everything before it
//
// The file version changes only when this framing changes; the stream's
// format version when the stream framing changes. A reader refuses either
// when it is newer than it knows.

// snapshotFileVersion is the framing version written by this binary.
const snapshotFileVersion = 1

var snapshotMagic = []byte("CNCDSNAP")

// maxFileHeaderBytes bounds the file header, which is small.
const maxFileHeaderBytes = 64 << 10

// SnapshotInfo describes a snapshot file.
type SnapshotInfo struct {
	// FileVersion is the file framing version; FormatVersion the FSM
	// stream's (0 when the stream was not read).
	FileVersion, FormatVersion uint32
	// Index and Term are the Raft position the snapshot captures.
	Index, Term uint64
	// Size is the length of the FSM stream in bytes.
	Size int64
	// Created is when it was saved (zero if unknown).
	Created time.Time
	// NodeID, SystemID and Version name the saving node, its system and
	// its binary.
	NodeID, SystemID, Version string
	// Modules lists the state modules in stream order with their record
	// counts (one record per entity: agent, scope, session, run, ...).
	Modules []ModuleRecords
}

// ModuleRecords is one module's share of a snapshot.
type ModuleRecords struct {
	Name    string
	Records int
	// Kinds counts the records by kind (agent, session, run, ...) in the
	// order first seen, when the inspector could tell kinds apart (see
	// InspectSnapshotKinds); nil otherwise.
	Kinds []KindCount
}

// KindCount is the number of records of one kind.
type KindCount struct {
	Kind    string
	Records int
}

// RecordKind names the kind of one record of a module ("" when it cannot
// tell). raftstore knows no module's records: the caller supplies it.
type RecordKind func(module string, data []byte) string

func infoFromHeader(h *concordv1.SnapshotFileHeader) SnapshotInfo {
	info := SnapshotInfo{
		FileVersion: snapshotFileVersion, Index: h.GetIndex(), Term: h.GetTerm(), Size: h.GetSize(),
		NodeID: h.GetNodeId(), SystemID: h.GetSystemId(), Version: h.GetVersion(),
	}
	if ms := h.GetCreatedUnixMs(); ms > 0 {
		info.Created = time.UnixMilli(ms).UTC()
	}
	return info
}

// InspectSnapshot reads a whole snapshot file, verifies its checksum and
// versions and counts each module's records, without decoding them (it
// needs no modules, so the CLI can run it anywhere).
func InspectSnapshot(r io.Reader) (SnapshotInfo, error) { return InspectSnapshotKinds(r, nil) }

// InspectSnapshotKinds is InspectSnapshot that also counts each module's
// records by the kind kind names (nil: no kinds).
func InspectSnapshotKinds(r io.Reader, kind RecordKind) (SnapshotInfo, error) {
	var format uint32
	var modules []ModuleRecords
	hdr, err := readSnapshotFile(r, func(_ *concordv1.SnapshotFileHeader, stream io.Reader) error {
		var err error
		format, modules, err = scanStream(stream, kind)
		return err
	})
	if err != nil {
		return SnapshotInfo{}, err
	}
	info := infoFromHeader(hdr)
	info.FormatVersion, info.Modules = format, modules
	return info, nil
}

// scanStream walks an FSM snapshot stream, counting records per module
// and, with kind, per kind.
func scanStream(r io.Reader, kind RecordKind) (format uint32, modules []ModuleRecords, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	hdr, err := readStreamHeader(br)
	if err != nil {
		return 0, nil, err
	}
	for _, name := range hdr.Modules {
		rr := &recordReader{r: br, module: name}
		var kinds []KindCount
		for {
			data, err := rr.next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return 0, nil, err
			}
			if kind == nil {
				continue
			}
			k := kind(name, data)
			if k == "" {
				k = "unknown"
			}
			if i := slices.IndexFunc(kinds, func(c KindCount) bool { return c.Kind == k }); i >= 0 {
				kinds[i].Records++
			} else {
				kinds = append(kinds, KindCount{Kind: k, Records: 1})
			}
		}
		modules = append(modules, ModuleRecords{Name: name, Records: rr.count, Kinds: kinds})
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return 0, nil, fmt.Errorf("%w: trailing data after last module", ErrBadSnapshot)
	}
	return hdr.FormatVersion, modules, nil
}

// writeSnapshotFile writes the framing around hdr.Size bytes of stream.
func writeSnapshotFile(w io.Writer, hdr *concordv1.SnapshotFileHeader, stream io.Reader) error {
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	var prefix [10]byte
	copy(prefix[:], snapshotMagic)
	binary.BigEndian.PutUint16(prefix[8:], snapshotFileVersion)
	if _, err := bw.Write(prefix[:]); err != nil {
		return fmt.Errorf("write snapshot file: %w", err)
	}
	if _, err := protodelim.MarshalTo(bw, hdr); err != nil {
		return fmt.Errorf("write snapshot file header: %w", err)
	}
	if n, err := io.CopyN(bw, stream, hdr.GetSize()); err != nil {
		return fmt.Errorf("write snapshot stream (%d of %d bytes): %w", n, hdr.GetSize(), err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot file: %w", err)
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("write snapshot checksum: %w", err)
	}
	return nil
}

// readSnapshotFile checks the framing of a snapshot file and hands its FSM
// stream to consume. The checksum can only be checked at the end, so a
// corrupt file may reach consume: when consume fails and the checksum too,
// the checksum error is returned (it says what is really wrong).
func readSnapshotFile(r io.Reader, consume func(*concordv1.SnapshotFileHeader, io.Reader) error) (*concordv1.SnapshotFileHeader, error) {
	hr := &hashingReader{r: bufio.NewReaderSize(r, 64<<10), h: sha256.New()}
	var prefix [10]byte
	switch n, err := io.ReadFull(hr, prefix[:]); {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: empty file", ErrCorruptSnapshotFile)
	case !bytes.Equal(prefix[:min(n, len(snapshotMagic))], snapshotMagic[:min(n, len(snapshotMagic))]):
		return nil, fmt.Errorf("%w: not a concord snapshot file (bad magic)", ErrCorruptSnapshotFile)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrCorruptSnapshotFile, n)
	case err != nil:
		return nil, fmt.Errorf("%w: read: %w", ErrCorruptSnapshotFile, err)
	}
	if v := binary.BigEndian.Uint16(prefix[8:]); v == 0 || v > snapshotFileVersion {
		return nil, &VersionError{What: "snapshot file", Got: uint32(v), Max: snapshotFileVersion}
	}
	hdr := &concordv1.SnapshotFileHeader{}
	if err := (protodelim.UnmarshalOptions{MaxSize: maxFileHeaderBytes}).UnmarshalFrom(hr, hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrCorruptSnapshotFile, err)
	}
	if hdr.GetSize() < 0 {
		return nil, fmt.Errorf("%w: negative stream size", ErrCorruptSnapshotFile)
	}
	stream := io.LimitReader(hr, hdr.GetSize())
	consumeErr := consume(hdr, stream)
	// Whatever consume read, hash the rest of the stream to reach the sum.
	rest, err := io.Copy(io.Discard, stream)
	if err != nil {
		return nil, fmt.Errorf("%w: read stream: %w", ErrCorruptSnapshotFile, err)
	}
	if rest > 0 && consumeErr == nil {
		consumeErr = fmt.Errorf("%w: %d bytes after the end of the stream", ErrBadSnapshot, rest)
	}
	if err := hr.verify(); err != nil {
		return nil, err
	}
	if consumeErr != nil {
		return nil, consumeErr
	}
	return hdr, nil
}

// hashingReader hashes every byte it hands out, so the checksum covers
// exactly what was consumed and not what bufio read ahead.
type hashingReader struct {
	r *bufio.Reader
	h hash.Hash
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	return n, err
}

func (hr *hashingReader) ReadByte() (byte, error) {
	b, err := hr.r.ReadByte()
	if err == nil {
		hr.h.Write([]byte{b})
	}
	return b, err
}

// verify reads the trailing checksum and requires the end of the file.
func (hr *hashingReader) verify() error {
	var sum [sha256.Size]byte
	if _, err := io.ReadFull(hr.r, sum[:]); err != nil {
		return fmt.Errorf("%w: truncated (checksum missing)", ErrCorruptSnapshotFile)
	}
	if !bytes.Equal(sum[:], hr.h.Sum(nil)) {
		return fmt.Errorf("%w: checksum mismatch", ErrCorruptSnapshotFile)
	}
	if _, err := hr.r.ReadByte(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the checksum", ErrCorruptSnapshotFile)
	}
	return nil
}
