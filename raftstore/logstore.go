package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// logStore is raft's LogStore and StableStore. The log is a segment log
// (segLog, DataDir/raft-log/), one fdatasync per append; the stable store
// (term, vote: written only around elections) is raft-boltdb/v2 on one
// bbolt file (DataDir/raft.db). Both are synced before a write returns, so
// an acknowledged entry survives a crash, except the appends of a
// non-voter, which nobody counts on (nvsync.go). It counts StoreLogs calls (one
// fsync each) and the entries they carry, so Stats and the benchmarks can
// show how many commands share an fsync (raft groups concurrent applies;
// DESIGN.md, "Batching").
type logStore struct {
	log     *segLog
	stable  *raftboltdb.BoltStore
	batches atomic.Uint64 // StoreLogs calls
	entries atomic.Uint64 // entries written by them
	// unsynced counts the StoreLogs calls written without fdatasync.
	unsynced atomic.Uint64

	// pmu guards policy and serialises appends, deletions and the syncs
	// of a switch to strict (nvsync.go).
	pmu    sync.Mutex
	policy syncPolicy
	// setAside: open found the unsynced marker and moved the log aside.
	setAside bool

	// full holds the last write error that said the disk is full (nil
	// after a write succeeds again); see DiskFull.
	full atomic.Pointer[error]
	// fault, for tests: called before each StoreLogs; a non-nil error is
	// returned as the write's error (Config.LogWriteFault).
	fault func() error

	dir       string       // the data dir: the space probe writes here
	lastProbe atomic.Int64 // unix nanos of the last space probe
	probeMu   sync.Mutex   // one probe at a time
}

var (
	_ raft.LogStore          = (*logStore)(nil)
	_ raft.StableStore       = (*logStore)(nil)
	_ raft.MonotonicLogStore = (*logStore)(nil)
)

// logDirName is the segment log's directory inside DataDir.
const logDirName = "raft-log"

// openLogStore opens (or creates) DataDir/raft.db and DataDir/raft-log,
// moving log entries that an older version kept in raft.db into the
// segment log first.
func openLogStore(dir string) (*logStore, error) {
	bs, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, "raft.db"),
		BoltOptions: &bolt.Options{
			// Another process holding the file fails fast instead of hanging.
			Timeout: time.Second,
			// Do not write the freelist in every commit: when raft.db held
			// the log, raft truncated it after each snapshot, the freed
			// pages made the freelist large, and writing it made every
			// append cost more as the log turned over. bbolt rebuilds it
			// by scanning the file on open instead.
			NoFreelistSync: true,
			FreelistType:   bolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("raftstore: open stable store: %w", err)
	}
	aside, err := setAsideUnsynced(dir)
	var sl *segLog
	if err == nil {
		sl, err = openSegLog(filepath.Join(dir, logDirName))
	}
	if err == nil {
		err = migrateBoltLog(bs, sl)
	}
	if err != nil {
		if sl != nil {
			_ = sl.Close()
		}
		_ = bs.Close()
		return nil, fmt.Errorf("raftstore: open log store: %w", err)
	}
	return &logStore{log: sl, stable: bs, dir: dir, setAside: aside}, nil
}

// migrateBoltLog moves the log entries in raft.db (written by versions that
// kept the log there) into the segment log. Entries are removed from
// raft.db only after all of them are synced in the segment log, so
// entries left in raft.db mean the move did not finish: it starts over
// from an empty segment log.
func migrateBoltLog(bs *raftboltdb.BoltStore, sl *segLog) error {
	first, err := bs.FirstIndex()
	if err != nil {
		return fmt.Errorf("read old log: %w", err)
	}
	last, err := bs.LastIndex()
	if err != nil {
		return fmt.Errorf("read old log: %w", err)
	}
	if first == 0 || last == 0 {
		return nil
	}
	if err := sl.DeleteRange(0, ^uint64(0)); err != nil {
		return fmt.Errorf("reset segment log: %w", err)
	}
	const batch = 1024
	for lo := first; lo <= last; lo += batch {
		hi := min(last, lo+batch-1)
		logs := make([]*raft.Log, 0, hi-lo+1)
		for i := lo; i <= hi; i++ {
			lg := new(raft.Log)
			if err := bs.GetLog(i, lg); err != nil {
				return fmt.Errorf("read old log entry %d: %w", i, err)
			}
			logs = append(logs, lg)
		}
		if err := sl.StoreLogs(logs); err != nil {
			return fmt.Errorf("copy old log: %w", err)
		}
	}
	if err := bs.DeleteRange(first, last); err != nil {
		return fmt.Errorf("remove old log: %w", err)
	}
	return nil
}

// FirstIndex, LastIndex, GetLog and IsMonotonic are the segment log's;
// DeleteRange also updates the sync policy.
func (l *logStore) FirstIndex() (uint64, error)              { return l.log.FirstIndex() }
func (l *logStore) LastIndex() (uint64, error)               { return l.log.LastIndex() }
func (l *logStore) GetLog(index uint64, log *raft.Log) error { return l.log.GetLog(index, log) }
func (l *logStore) DeleteRange(lo, hi uint64) error          { return l.deleteRange(lo, hi) }
func (l *logStore) IsMonotonic() bool                        { return true }

// Get and GetUint64 read the stable store.
func (l *logStore) Get(k []byte) ([]byte, error)       { return l.stable.Get(k) }
func (l *logStore) GetUint64(k []byte) (uint64, error) { return l.stable.GetUint64(k) }

// Close syncs what was appended unsynced, then closes the log and the
// stable store.
func (l *logStore) Close() error {
	l.pmu.Lock()
	l.policy.forget()
	err := l.settleLocked()
	l.pmu.Unlock()
	return errors.Join(err, l.log.Close(), l.stable.Close())
}

// StoreLog stores one entry.
func (l *logStore) StoreLog(log *raft.Log) error {
	return l.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores a group of entries with one write and one fsync (none
// for a non-voter: nvsync.go).
func (l *logStore) StoreLogs(logs []*raft.Log) error {
	var err error
	if l.fault != nil {
		err = l.fault()
	}
	if err == nil {
		err = l.appendLogs(logs)
	}
	if err != nil {
		return l.noteFull(err)
	}
	l.full.Store(nil)
	l.batches.Add(1)
	l.entries.Add(uint64(len(logs)))
	return nil
}

// Set and SetUint64 (the stable store: term, vote) record a full disk too.
// raft panics when it cannot save its term; the record at least lets the
// log say why.
func (l *logStore) Set(k, v []byte) error { return l.noteFull(l.stable.Set(k, v)) }

func (l *logStore) SetUint64(k []byte, v uint64) error {
	return l.noteFull(l.stable.SetUint64(k, v))
}

// noteFull records err when it says the disk is full (ENOSPC, or EDQUOT
// for a quota) and returns it, wrapped with ErrDiskFull in that case.
func (l *logStore) noteFull(err error) error {
	if err == nil || !(errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return err
	}
	err = fmt.Errorf("%w: write raft log: %w", ErrDiskFull, err)
	l.full.Store(&err)
	return err
}

// diskFull returns the last disk-full write error, nil when the last log
// write succeeded (or none failed).
func (l *logStore) diskFull() error {
	if p := l.full.Load(); p != nil {
		return *p
	}
	return nil
}

// Space probe: a follower writes its log only when the leader sends
// entries, so in a quiet cluster the record of a full disk would outlive
// the shortage. recheckFull writes and syncs probeBytes to a scratch file
// in the data dir (through the fault seam), at most once per
// probeInterval, and clears the record when that succeeds. A log write
// that fails again records it again.
const (
	probeBytes    = 256 << 10
	probeInterval = time.Second
)

// recheckFull probes for space when the disk was full, and returns the
// record as it then stands.
func (l *logStore) recheckFull() error {
	if l.diskFull() == nil {
		return nil
	}
	now := time.Now().UnixNano()
	if last := l.lastProbe.Load(); now-last < int64(probeInterval) || !l.probeMu.TryLock() {
		return l.diskFull()
	}
	defer l.probeMu.Unlock()
	l.lastProbe.Store(now)
	if err := l.probe(); err != nil {
		return l.diskFull()
	}
	l.full.Store(nil)
	return nil
}

func (l *logStore) probe() error {
	if l.fault != nil {
		if err := l.fault(); err != nil {
			return err
		}
	}
	f, err := os.CreateTemp(l.dir, ".space-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, probeBytes)); err != nil {
		return err
	}
	return f.Sync()
}
