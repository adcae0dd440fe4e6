package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// segLog is raft's LogStore: an append-only log in segment files under one
// directory, one write and one fdatasync per StoreLogs (bbolt needs two per
// transaction; DESIGN.md, "Log store"). Entries are records
//
//	[4 bytes payload length][4 bytes CRC-32C of the payload][payload]
//
// in index order; a segment is named by the index of its first record, and
// a new one starts once the active one passes segmentBytes.
//
// Crash safety: StoreLogs returns only after the data is synced, so an
// acknowledged entry survives. A crash during a write leaves a torn or
// zero-filled tail in the last segment (the active segment is zero-filled
// ahead of its end on purpose, reserve); open drops it (length, CRC and
// index checks) and truncates the file there. That tail was never
// acknowledged. Damage anywhere else is an error: the log is not silently
// shortened.
//
// Deletion: a suffix (raft's conflict truncation) is cut first by removing
// later segments, newest first, then truncating the file that holds the
// new end, synced, so a crash midway leaves a shorter contiguous log,
// never a gap. A prefix (compaction after a snapshot) first records the
// new first index in a small file (firstFile, replaced atomically), then
// removes the segments wholly below it, oldest first; entries below it in
// the head segment stay on disk and are skipped. The store is monotonic
// (raft.MonotonicLogStore): raft deletes the whole log when it installs a
// snapshot, so an append is always contiguous with the log or starts an
// empty one.
type segLog struct {
	dir    string
	maxSeg int64 // segmentBytes; tests lower it to rotate often

	// wmu serialises writers (StoreLogs from raft's main loop, DeleteRange
	// from its snapshot goroutine); the active file is written without
	// holding mu, so readers are not held up by an fsync.
	wmu sync.Mutex
	buf []byte // record encoding buffer, owned by the writer

	// written, when set, is called with each append's entries once they
	// are written to the file and before they are synced (the leader's
	// early append, earlyappend.go). Set before the log is used.
	written func(logs []*raft.Log)

	mu    sync.RWMutex // guards segs and first
	segs  []*segment   // by index; the last one is active
	first uint64       // first index (0: empty log)
}

// segment is one file: the records of indexes base..base+len(offs)-1, the
// record at base+i starting at offs[i]; size is the end of the last one.
// The active segment is zero-filled ahead of size up to alloc (reserve);
// other segments end at size.
type segment struct {
	base  uint64
	offs  []int64
	size  int64
	alloc int64
	f     *os.File
	// unsynced: written without fdatasync since the last sync (guarded
	// by mu; set and cleared by the writer).
	unsynced bool
}

func (s *segment) last() uint64 { return s.base + uint64(len(s.offs)) - 1 }

const (
	// segmentBytes is the size past which a new segment starts; a
	// compaction frees space in whole segments.
	segmentBytes = 32 << 20
	// preallocBytes is how far ahead of its end the active segment is
	// zero-filled (reserve): appends then overwrite allocated blocks, and
	// their fdatasync flushes data without a journal commit for the file's
	// new size (DESIGN.md, "Log store": ~40% less CPU per sync on ext4).
	preallocBytes = 1 << 20
	recHeader     = 8
	// recFixed is the payload size without data and extensions: index,
	// term, appended-at (8 each), type (1), two lengths (4 each).
	recFixed = 8 + 8 + 8 + 1 + 4 + 4
	// maxRecord bounds a record's length field: raft entries are far
	// smaller, so anything larger is a torn or damaged length.
	maxRecord = 1 << 30
	segSuffix = ".seg"
	// firstFile holds the first index after a prefix deletion inside
	// the head segment (8 bytes little-endian, then their CRC-32C).
	firstFile = "first"
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	// errSegCorrupt marks damage that open cannot repair by dropping a
	// torn tail.
	errSegCorrupt = errors.New("raftstore: raft log segment damaged")
)

var (
	_ raft.LogStore          = (*segLog)(nil)
	_ raft.MonotonicLogStore = (*segLog)(nil)
)

// openSegLog opens (or creates) the log in dir, dropping a torn tail.
func openSegLog(dir string) (*segLog, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("raftstore: create log dir: %w", err)
	}
	names, err := segmentNames(dir)
	if err != nil {
		return nil, err
	}
	l := &segLog{dir: dir, maxSeg: segmentBytes}
	for i, base := range names {
		seg, err := openSegment(dir, base, i == len(names)-1)
		if err != nil {
			l.Close()
			return nil, err
		}
		if len(seg.offs) == 0 && i == len(names)-1 {
			// A segment created but never written (crash right after
			// rotation, or a torn first write): nothing to keep.
			_ = seg.f.Close()
			if err := os.Remove(segPath(dir, base)); err != nil {
				l.Close()
				return nil, fmt.Errorf("raftstore: remove empty log segment: %w", err)
			}
			continue
		}
		if len(seg.offs) == 0 {
			_ = seg.f.Close()
			l.Close()
			return nil, fmt.Errorf("%w: segment %d is empty but not the last", errSegCorrupt, base)
		}
		if n := len(l.segs); n > 0 && l.segs[n-1].last()+1 != seg.base {
			err := fmt.Errorf("%w: segment %d does not follow index %d", errSegCorrupt, base, l.segs[n-1].last())
			_ = seg.f.Close()
			l.Close()
			return nil, err
		}
		l.segs = append(l.segs, seg)
	}
	if len(l.segs) > 0 {
		l.first = l.segs[0].base
		// A recorded first index applies only inside the log: a crash
		// between removing it and removing the segments of a full
		// deletion leaves segments without one, and those are genuine
		// entries.
		if f, ok := readFirst(dir); ok && f > l.first && f <= l.lastLocked() {
			l.first = f
		}
	}
	return l, nil
}

// readFirst reads firstFile; ok is false when it is absent or damaged.
func readFirst(dir string) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, firstFile))
	if err != nil || len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}

// writeFirst replaces firstFile with first, durably.
func writeFirst(dir string, first uint64) error {
	b := binary.LittleEndian.AppendUint64(nil, first)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := filepath.Join(dir, firstFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("raftstore: record log start: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, firstFile))
	}
	if err != nil {
		return fmt.Errorf("raftstore: record log start: %w", err)
	}
	return syncDir(dir)
}

// segmentNames lists the segments' base indexes in order.
func segmentNames(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raftstore: read log dir: %w", err)
	}
	var out []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok || e.IsDir() {
			continue
		}
		base, err := strconv.ParseUint(name, 10, 64)
		if err != nil || base == 0 {
			return nil, fmt.Errorf("%w: unexpected file %s", errSegCorrupt, e.Name())
		}
		out = append(out, base)
	}
	slices.Sort(out)
	return out, nil
}

func segPath(dir string, base uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, segSuffix))
}

// openSegment reads a segment's records. In the last segment (tail) a bad
// record ends the log: the file is truncated there and synced.
func openSegment(dir string, base uint64, tail bool) (*segment, error) {
	f, err := os.OpenFile(segPath(dir, base), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open log segment: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftstore: read log segment %d: %w", base, err)
	}
	seg := &segment{base: base, f: f}
	var off int64
	for off < int64(len(data)) {
		n, idx, ok := scanRecord(data[off:])
		if !ok || idx != base+uint64(len(seg.offs)) {
			break
		}
		seg.offs = append(seg.offs, off)
		off += n
	}
	seg.size, seg.alloc = off, off
	if off == int64(len(data)) {
		return seg, nil
	}
	if !tail {
		_ = f.Close()
		return nil, fmt.Errorf("%w: segment %d has a bad record at offset %d", errSegCorrupt, base, off)
	}
	if err := f.Truncate(off); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftstore: drop torn log tail: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftstore: drop torn log tail: %w", err)
	}
	return seg, nil
}

// scanRecord checks the record at the start of b and returns its length
// and index; ok is false for a short, oversized or damaged record.
func scanRecord(b []byte) (n int64, index uint64, ok bool) {
	if len(b) < recHeader {
		return 0, 0, false
	}
	size := binary.LittleEndian.Uint32(b)
	if size < recFixed || size > maxRecord || int64(len(b)-recHeader) < int64(size) {
		return 0, 0, false
	}
	payload := b[recHeader : recHeader+int(size)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, 0, false
	}
	return recHeader + int64(size), binary.LittleEndian.Uint64(payload), true
}

// appendRecord encodes log onto b.
func appendRecord(b []byte, log *raft.Log) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(recFixed+len(log.Data)+len(log.Extensions)))
	b = binary.LittleEndian.AppendUint32(b, 0) // CRC, below
	b = binary.LittleEndian.AppendUint64(b, log.Index)
	b = binary.LittleEndian.AppendUint64(b, log.Term)
	var at int64
	if !log.AppendedAt.IsZero() {
		at = log.AppendedAt.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	b = append(b, byte(log.Type))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(log.Data)))
	b = append(b, log.Data...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(log.Extensions)))
	b = append(b, log.Extensions...)
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+recHeader:], castagnoli))
	return b
}

// decodeRecord fills log from a record that scanRecord accepted.
func decodeRecord(rec []byte, log *raft.Log) error {
	p := rec[recHeader:]
	log.Index = binary.LittleEndian.Uint64(p)
	log.Term = binary.LittleEndian.Uint64(p[8:])
	log.AppendedAt = time.Time{}
	if at := int64(binary.LittleEndian.Uint64(p[16:])); at != 0 {
		log.AppendedAt = time.Unix(0, at)
	}
	log.Type = raft.LogType(p[24])
	p = p[25:]
	dn := binary.LittleEndian.Uint32(p)
	if uint64(dn)+8 > uint64(len(p)) {
		return fmt.Errorf("%w: entry %d data length", errSegCorrupt, log.Index)
	}
	log.Data = p[4 : 4+dn]
	p = p[4+dn:]
	en := binary.LittleEndian.Uint32(p)
	if uint64(en)+4 != uint64(len(p)) {
		return fmt.Errorf("%w: entry %d extensions length", errSegCorrupt, log.Index)
	}
	log.Extensions = nil
	if en > 0 {
		log.Extensions = p[4:]
	}
	return nil
}

// IsMonotonic implements raft.MonotonicLogStore: appends must continue the
// log, so raft deletes the whole log when it installs a snapshot.
func (l *segLog) IsMonotonic() bool { return true }

// FirstIndex implements raft.LogStore (0 when empty).
func (l *segLog) FirstIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.first, nil
}

// LastIndex implements raft.LogStore (0 when empty).
func (l *segLog) LastIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastLocked(), nil
}

func (l *segLog) lastLocked() uint64 {
	if len(l.segs) == 0 {
		return 0
	}
	return l.segs[len(l.segs)-1].last()
}

// GetLog implements raft.LogStore.
func (l *segLog) GetLog(index uint64, log *raft.Log) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.first == 0 || index < l.first || index > l.lastLocked() {
		return raft.ErrLogNotFound
	}
	i, _ := slices.BinarySearchFunc(l.segs, index, func(s *segment, idx uint64) int {
		switch {
		case s.last() < idx:
			return -1
		case s.base > idx:
			return 1
		}
		return 0
	})
	seg := l.segs[i]
	k := index - seg.base
	end := seg.size
	if k+1 < uint64(len(seg.offs)) {
		end = seg.offs[k+1]
	}
	rec := make([]byte, end-seg.offs[k])
	if _, err := seg.f.ReadAt(rec, seg.offs[k]); err != nil {
		return fmt.Errorf("raftstore: read log entry %d: %w", index, err)
	}
	if _, idx, ok := scanRecord(rec); !ok || idx != index {
		return fmt.Errorf("%w: entry %d does not read back", errSegCorrupt, index)
	}
	return decodeRecord(rec, log)
}

// StoreLog implements raft.LogStore.
func (l *segLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore: one write and one fdatasync for the
// whole group. The entries must continue the log (or start an empty one).
func (l *segLog) StoreLogs(logs []*raft.Log) error { return l.storeLogs(logs, true) }

// storeLogs appends logs, with an fdatasync when sync is set; without, the
// segment is marked unsynced until syncAll.
func (l *segLog) storeLogs(logs []*raft.Log, sync bool) error {
	if len(logs) == 0 {
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	last, first := l.lastLocked(), l.first
	var active *segment
	if n := len(l.segs); n > 0 {
		active = l.segs[n-1]
	}
	l.mu.RUnlock()
	for i, lg := range logs {
		if (first != 0 || i > 0) && lg.Index != last+1 || lg.Index == 0 {
			return fmt.Errorf("raftstore: log append of index %d does not follow %d", lg.Index, last)
		}
		last = lg.Index
	}
	fresh := active == nil || active.size >= l.maxSeg
	if fresh {
		if active != nil {
			if err := l.seal(active); err != nil {
				return err
			}
		}
		var err error
		if active, err = l.createSegment(logs[0].Index); err != nil {
			return err
		}
	}
	l.buf = l.buf[:0]
	offs := make([]int64, len(logs))
	for i, lg := range logs {
		offs[i] = active.size + int64(len(l.buf))
		l.buf = appendRecord(l.buf, lg)
	}
	if sync {
		// Unsynced (a non-voter's appends, nvsync.go) there is no
		// fdatasync for the reserve to save a journal commit on, and
		// filling it would write every byte twice.
		l.reserve(active, int64(len(l.buf)))
	}
	if _, err := active.f.WriteAt(l.buf, active.size); err != nil {
		return l.undoAppend(active, fresh, fmt.Errorf("raftstore: write raft log: %w", err))
	}
	if l.written != nil {
		l.written(logs)
	}
	if sync {
		if err := fdatasync(active.f); err != nil {
			return l.undoAppend(active, fresh, fmt.Errorf("raftstore: sync raft log: %w", err))
		}
	}
	l.mu.Lock()
	active.unsynced = active.unsynced || !sync
	if fresh {
		l.segs = append(l.segs, active)
	}
	active.offs = append(active.offs, offs...)
	active.size += int64(len(l.buf))
	active.alloc = max(active.alloc, active.size) // past the reserve when it could not be filled
	if l.first == 0 {
		l.first = logs[0].Index
	}
	l.mu.Unlock()
	if cap(l.buf) > 4*segmentBytes/32 {
		l.buf = nil // do not keep one huge batch's buffer
	}
	return nil
}

// undoAppend cuts a failed write off the active segment (its bytes may be
// partly on disk; a later write would otherwise land after them), or
// removes a segment that this append created.
func (l *segLog) undoAppend(seg *segment, fresh bool, err error) error {
	if fresh {
		_ = seg.f.Close()
		_ = os.Remove(segPath(l.dir, seg.base))
		return err
	}
	seg.alloc = seg.size
	if terr := seg.f.Truncate(seg.size); terr != nil {
		return fmt.Errorf("%w (and dropping the partial write failed: %v)", err, terr)
	}
	return err
}

// zeros is what reserve writes ahead of the active segment's end.
var zeros [64 << 10]byte

// reserve zero-fills seg past its end, preallocBytes at a time, so that
// the next n bytes land inside the file. The zeros become durable with the
// append's fdatasync; until then, and after a crash, they read as the end
// of the log (open stops at a zero length and drops the tail). It is only
// an optimisation: when the fill fails (a full disk), the file is cut back
// to alloc (never below a record: alloc >= size always) and the append
// goes on without it, reporting its own error if it fails too.
func (l *segLog) reserve(seg *segment, n int64) {
	if seg.size+n <= seg.alloc {
		return
	}
	end := seg.size + n + min(preallocBytes, l.maxSeg)
	for off := seg.alloc; off < end; off += int64(len(zeros)) {
		if _, err := seg.f.WriteAt(zeros[:min(int64(len(zeros)), end-off)], off); err != nil {
			_ = seg.f.Truncate(seg.alloc)
			return
		}
	}
	seg.alloc = end
}

// seal cuts the zero-filled reserve off a full segment before the next
// one is created, synced, so that only the last segment ever ends in
// zeros (open refuses a bad record anywhere else).
func (l *segLog) seal(seg *segment) error {
	if seg.alloc == seg.size {
		return nil
	}
	if err := seg.f.Truncate(seg.size); err != nil {
		return fmt.Errorf("raftstore: seal log segment: %w", err)
	}
	if err := fdatasync(seg.f); err != nil {
		return fmt.Errorf("raftstore: seal log segment: %w", err)
	}
	l.mu.Lock()
	seg.unsynced = false // that sync covered a non-voter's unsynced appends too
	l.mu.Unlock()
	seg.alloc = seg.size
	return nil
}

// createSegment creates the file for a segment starting at base and syncs
// the directory, so the file survives a crash once its data is synced.
func (l *segLog) createSegment(base uint64) (*segment, error) {
	f, err := os.OpenFile(segPath(l.dir, base), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, fmt.Errorf("raftstore: create log segment: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		_ = os.Remove(segPath(l.dir, base))
		return nil, err
	}
	return &segment{base: base, f: f}, nil
}

// DeleteRange implements raft.LogStore. raft deletes a prefix (compaction),
// a suffix (conflicting entries), or everything (snapshot install); a
// range strictly inside the log is refused.
func (l *segLog) DeleteRange(lo, hi uint64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	first, last := l.first, l.lastLocked()
	l.mu.RUnlock()
	if first == 0 || hi < first || lo > last || lo > hi {
		return nil
	}
	switch {
	case lo <= first && hi >= last:
		return l.deleteSuffix(first)
	case lo <= first:
		return l.deletePrefix(hi)
	case hi >= last:
		return l.deleteSuffix(lo)
	}
	return fmt.Errorf("raftstore: log delete of %d..%d inside %d..%d", lo, hi, first, last)
}

// deletePrefix drops entries up to hi (below the last entry).
func (l *segLog) deletePrefix(hi uint64) error {
	if err := writeFirst(l.dir, hi+1); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	drop := 0
	for drop < len(l.segs)-1 && l.segs[drop].last() <= hi {
		drop++
	}
	for _, seg := range l.segs[:drop] {
		_ = seg.f.Close()
		if err := os.Remove(segPath(l.dir, seg.base)); err != nil {
			l.segs = l.segs[drop:]
			l.first = max(l.segs[0].base, hi+1)
			return fmt.Errorf("raftstore: remove log segment: %w", err)
		}
	}
	l.segs = slices.Delete(l.segs, 0, drop)
	l.first = hi + 1
	return nil
}

// deleteSuffix drops entries from lo on (lo at or before the first entry:
// all of them).
func (l *segLog) deleteSuffix(lo uint64) error {
	all := lo <= l.first
	if all {
		// Everything goes (also entries below the first index that the
		// head segment still holds): drop the recorded start first, so
		// that a crash midway leaves genuine entries, not a start beyond
		// them.
		if err := os.Remove(filepath.Join(l.dir, firstFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("raftstore: reset log start: %w", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.segs) > 0 {
		seg := l.segs[len(l.segs)-1]
		if !all && seg.base < lo {
			break
		}
		_ = seg.f.Close()
		if err := os.Remove(segPath(l.dir, seg.base)); err != nil {
			return fmt.Errorf("raftstore: remove log segment: %w", err)
		}
		l.segs = l.segs[:len(l.segs)-1]
	}
	if len(l.segs) == 0 {
		l.first = 0
		return syncDir(l.dir)
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	seg := l.segs[len(l.segs)-1]
	if lo > seg.last() {
		return nil
	}
	k := lo - seg.base
	if err := seg.f.Truncate(seg.offs[k]); err != nil {
		return fmt.Errorf("raftstore: truncate raft log: %w", err)
	}
	if err := fdatasync(seg.f); err != nil {
		return fmt.Errorf("raftstore: sync raft log: %w", err)
	}
	seg.size, seg.alloc = seg.offs[k], seg.offs[k]
	seg.offs = seg.offs[:k] // k >= 1: segments starting at lo or later are gone
	return nil
}

// syncAll fdatasyncs every segment written without a sync, so that
// everything appended so far is durable.
func (l *segLog) syncAll() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	var dirty []*segment
	for _, seg := range l.segs {
		if seg.unsynced {
			dirty = append(dirty, seg)
		}
	}
	l.mu.RUnlock()
	for _, seg := range dirty {
		if err := fdatasync(seg.f); err != nil {
			return fmt.Errorf("raftstore: sync raft log: %w", err)
		}
		l.mu.Lock()
		seg.unsynced = false
		l.mu.Unlock()
	}
	return nil
}

// Close closes the segment files.
func (l *segLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, seg := range l.segs {
		errs = append(errs, seg.f.Close())
	}
	l.segs = nil
	return errors.Join(errs...)
}

// syncDir makes file creations and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("raftstore: sync log dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("raftstore: sync log dir: %w", err)
	}
	return nil
}
