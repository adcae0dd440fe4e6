package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// boltStore is raft's LogStore and StableStore in one bbolt file. It stands
// in for raft-boltdb/v2, whose latest release (v2.3.1) imports
// go-metrics/compat, a package go-metrics v0.7.0 (required by raft v1.8.0)
// no longer has, so the two cannot be built together (DESIGN.md, "Log
// store"). Every write transaction is fsync'ed: an acknowledged entry must
// survive a crash. Safe for concurrent use (bbolt serialises writers).
type boltStore struct {
	db *bolt.DB

	// batches and entries count StoreLogs calls and the entries they
	// wrote; entries/batches is the average group-commit size (Stats).
	batches atomic.Uint64
	entries atomic.Uint64
}

var (
	_ raft.LogStore    = (*boltStore)(nil)
	_ raft.StableStore = (*boltStore)(nil)

	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")
)

// errStableNotFound is what raft expects from a StableStore for a missing
// key: raft compares err.Error() with "not found", so the text is fixed.
var errStableNotFound = errors.New("not found")

// logEncodingVersion prefixes every stored entry so the encoding can evolve.
const logEncodingVersion = 1

// openLogStore opens (or creates) DataDir/raft.db.
func openLogStore(dir string) (*boltStore, error) {
	db, err := bolt.Open(filepath.Join(dir, "raft.db"), 0o600, &bolt.Options{
		Timeout: time.Second, // another process holding the file fails fast
		// The freelist is rebuilt on open instead of written on every
		// commit: less I/O per fsync, slower open of huge files.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("raftstore: open log store: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketLogs, bucketStable} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("raftstore: init log store: %w", err)
	}
	return &boltStore{db: db}, nil
}

// Close closes the file; no method may be called afterwards.
func (b *boltStore) Close() error { return b.db.Close() }

func indexKey(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

func (b *boltStore) edgeIndex(last bool) (uint64, error) {
	var idx uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		k, _ := c.First()
		if last {
			k, _ = c.Last()
		}
		if k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

// FirstIndex implements raft.LogStore (0 when empty).
func (b *boltStore) FirstIndex() (uint64, error) { return b.edgeIndex(false) }

// LastIndex implements raft.LogStore (0 when empty).
func (b *boltStore) LastIndex() (uint64, error) { return b.edgeIndex(true) }

// GetLog implements raft.LogStore.
func (b *boltStore) GetLog(index uint64, l *raft.Log) error {
	return b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(indexKey(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		if err := decodeLog(v, l); err != nil {
			return fmt.Errorf("raftstore: log entry %d: %w", index, err)
		}
		l.Index = index
		return nil
	})
}

// StoreLog implements raft.LogStore.
func (b *boltStore) StoreLog(l *raft.Log) error { return b.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: the whole group in one transaction,
// so one fsync covers every entry raft batched together.
func (b *boltStore) StoreLogs(logs []*raft.Log) error {
	b.batches.Add(1)
	b.entries.Add(uint64(len(logs)))
	return b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketLogs)
		for _, l := range logs {
			if err := bk.Put(indexKey(l.Index), encodeLog(l)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteRange implements raft.LogStore (inclusive bounds).
func (b *boltStore) DeleteRange(minIdx, maxIdx uint64) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(indexKey(minIdx)); k != nil; k, _ = c.Next() {
			if binary.BigEndian.Uint64(k) > maxIdx {
				break
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Set implements raft.StableStore.
func (b *boltStore) Set(key, val []byte) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketStable).Put(key, val)
	})
}

// Get implements raft.StableStore.
func (b *boltStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketStable).Get(key)
		if v == nil {
			return errStableNotFound
		}
		out = append([]byte(nil), v...) // bolt's memory dies with the tx
		return nil
	})
	return out, err
}

// SetUint64 implements raft.StableStore.
func (b *boltStore) SetUint64(key []byte, val uint64) error {
	return b.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore.
func (b *boltStore) GetUint64(key []byte) (uint64, error) {
	v, err := b.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: stable key %q holds %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// encodeLog writes version, term, type, appended-at (unix ns, 0 = unset),
// then length-prefixed data and extensions. The index is the key.
func encodeLog(l *raft.Log) []byte {
	buf := make([]byte, 0, 1+3*binary.MaxVarintLen64+1+2*binary.MaxVarintLen32+len(l.Data)+len(l.Extensions))
	buf = append(buf, logEncodingVersion)
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.AppendVarint(buf, at)
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	return append(buf, l.Extensions...)
}

// decodeLog is encodeLog's inverse; it copies out of v (bolt memory).
func decodeLog(v []byte, l *raft.Log) error {
	d := logDecoder{buf: v}
	if ver := d.u8(); ver != logEncodingVersion {
		return fmt.Errorf("unknown encoding version %d", ver)
	}
	l.Term = d.uvarint()
	l.Type = raft.LogType(d.u8())
	l.AppendedAt = time.Time{}
	if at := d.varint(); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	l.Data = d.blob()
	l.Extensions = d.blob()
	if d.err == nil && len(d.buf) != 0 {
		d.err = errors.New("trailing bytes")
	}
	return d.err
}

// logDecoder reads the fields of encodeLog, remembering the first error.
type logDecoder struct {
	buf []byte
	err error
}

func (d *logDecoder) fail() { d.err, d.buf = errors.New("truncated entry"), nil }

func (d *logDecoder) u8() byte {
	if len(d.buf) < 1 {
		d.fail()
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

func (d *logDecoder) uvarint() uint64 {
	x, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return x
}

func (d *logDecoder) varint() int64 {
	x, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return x
}

func (d *logDecoder) blob() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.buf)) {
		d.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	out := append([]byte(nil), d.buf[:n]...)
	d.buf = d.buf[n:]
	return out
}
