package raftstore

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
)

// logStore is raft's LogStore and StableStore: raft-boltdb/v2 on one bbolt
// file (DataDir/raft.db), fsync'ed on every write transaction so an
// acknowledged entry survives a crash. It counts StoreLogs calls (one bolt
// transaction, one fsync each) and the entries they carry, so Stats and the
// benchmarks can show how many commands share an fsync (raft groups
// concurrent applies; DESIGN.md, "Batching").
type logStore struct {
	*raftboltdb.BoltStore
	batches atomic.Uint64 // StoreLogs calls
	entries atomic.Uint64 // entries written by them
}

var (
	_ raft.LogStore    = (*logStore)(nil)
	_ raft.StableStore = (*logStore)(nil)
)

// openLogStore opens (or creates) DataDir/raft.db.
func openLogStore(dir string) (*logStore, error) {
	bs, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, "raft.db"),
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
	if err != nil {
		return nil, fmt.Errorf("raftstore: open log store: %w", err)
	}
	return &logStore{BoltStore: bs}, nil
}

// StoreLog stores one entry (one transaction).
func (l *logStore) StoreLog(log *raft.Log) error {
	return l.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores a group of entries in one transaction (one fsync).
func (l *logStore) StoreLogs(logs []*raft.Log) error {
	if err := l.BoltStore.StoreLogs(logs); err != nil {
		return err
	}
	l.batches.Add(1)
	l.entries.Add(uint64(len(logs)))
	return nil
}
