package raftstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	bolt "go.etcd.io/bbolt"
)

// Log store kinds (Config.LogStore).
const (
	// LogStoreWAL is hashicorp/raft-wal in DataDir/wal: append-only
	// segment files, one write and one fsync per group of entries.
	LogStoreWAL = "wal"
	// LogStoreBolt is raft-boltdb/v2 in DataDir/raft.db: a bbolt B+tree,
	// two fsyncs per transaction (pages, then the meta page).
	LogStoreBolt = "bolt"
)

// Where each kind keeps its files inside DataDir.
const (
	walDirName   = "wal"
	boltFileName = "raft.db"
)

// durableLog is what both kinds provide: raft's LogStore and StableStore.
type durableLog interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// logStore is raft's LogStore and StableStore, fsync'ed on every write so
// an acknowledged entry survives a crash. It counts StoreLogs calls (one
// write and one fsync group each) and the entries they carry, so Stats and
// the benchmarks can show how many commands share an fsync (raft groups
// concurrent applies; DESIGN.md, "Batching").
type logStore struct {
	durableLog
	kind    string
	batches atomic.Uint64 // StoreLogs calls
	entries atomic.Uint64 // entries written by them
}

var (
	_ raft.LogStore          = (*logStore)(nil)
	_ raft.StableStore       = (*logStore)(nil)
	_ raft.MonotonicLogStore = (*logStore)(nil)
)

// openLogStore opens the log in dir. A log that already exists decides
// the kind, whatever kind says (switching would need a migration of the
// entries and of raft's term and vote); a new one is created as kind.
// logger receives the WAL's own messages (it has no other output).
func openLogStore(dir, kind string, logger hclog.Logger) (*logStore, error) {
	switch {
	case exists(filepath.Join(dir, walDirName)):
		kind = LogStoreWAL
	case exists(filepath.Join(dir, boltFileName)):
		kind = LogStoreBolt
	}
	var (
		st  durableLog
		err error
	)
	switch kind {
	case LogStoreWAL:
		st, err = openWAL(filepath.Join(dir, walDirName), logger)
	case LogStoreBolt:
		st, err = openBolt(filepath.Join(dir, boltFileName))
	default:
		return nil, fmt.Errorf("%w: LogStore %q: use %q or %q", ErrInvalidConfig, kind, LogStoreWAL, LogStoreBolt)
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s log store: %w", kind, err)
	}
	return &logStore{durableLog: st, kind: kind}, nil
}

// walStore is raft-wal with its meta database, which WAL.Close leaves
// open (raft-wal v0.4.0): without closing it, the file stays locked and a
// Store reopened in the same process (a restart in tests) would wait for
// the lock forever.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func openWAL(dir string, logger hclog.Logger) (*walStore, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	// raft-wal opens its meta database without a lock timeout: probe the
	// lock first so that a second process on the same DataDir fails fast
	// instead of hanging.
	metaPath := filepath.Join(dir, metadb.FileName)
	if exists(metaPath) {
		probe, err := bolt.Open(metaPath, 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", metaPath, err)
		}
		if err := probe.Close(); err != nil {
			return nil, err
		}
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(meta), wal.WithLogger(logger))
	if err != nil {
		_ = meta.Close()
		return nil, err
	}
	return &walStore{WAL: w, meta: meta}, nil
}

// Close closes the WAL (after its in-flight writes), then its meta
// database.
func (w *walStore) Close() error {
	return errors.Join(w.WAL.Close(), w.meta.Close())
}

func openBolt(path string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{
		Path: path,
		BoltOptions: &bolt.Options{
			// Another process holding the file fails fast instead of hanging.
			Timeout: time.Second,
			// Do not write the freelist in every commit: raft truncates
			// the log after each snapshot, the freed pages make the
			// freelist large, and writing it made every append (and so
			// every commit) cost more as the log turned over. bbolt
			// rebuilds it by scanning the file on open instead.
			NoFreelistSync: true,
			FreelistType:   bolt.FreelistMapType,
		},
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// StoreLog stores one entry.
func (l *logStore) StoreLog(log *raft.Log) error {
	return l.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores a group of entries with one fsync.
func (l *logStore) StoreLogs(logs []*raft.Log) error {
	if err := l.durableLog.StoreLogs(logs); err != nil {
		return err
	}
	l.batches.Add(1)
	l.entries.Add(uint64(len(logs)))
	return nil
}

// IsMonotonic implements raft.MonotonicLogStore: the WAL refuses a gap
// between entries, so after installing a snapshot raft must delete the
// whole log rather than leave a gap; bolt tolerates either.
func (l *logStore) IsMonotonic() bool {
	m, ok := l.durableLog.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
