package raftstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkApply_Concurrent measures committed commands per second on one
// node with fsync on, with N goroutines calling Apply at once (a closed
// loop: each proposer waits for its commit before proposing again). Compare
// with BenchmarkBaseline_BoltPutFsync from the same run, which is what one
// fsync per command would allow. entries/fsync is the average number of
// commands raft group-committed per log write.
func BenchmarkApply_Concurrent(b *testing.B) {
	for _, proposers := range []int{64, 256} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			benchApply(b, proposers)
		})
	}
}

func benchApply(b *testing.B, proposers int) {
	cfg := TestConfig(b, "bench", newKV())
	cfg.Logger = nil // raft's logs would dominate the profile
	s := StartTestStore(b, cfg)
	ctx := context.Background()
	batches0, entries0 := s.bolt.batches.Load(), s.bolt.entries.Load()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range proposers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				kv := "k" + strconv.FormatInt(n%1024, 10) + "=v"
				if _, _, err := s.Apply(ctx, cmdKVPut, put(kv)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	if batches := s.bolt.batches.Load() - batches0; batches > 0 {
		b.ReportMetric(float64(s.bolt.entries.Load()-entries0)/float64(batches), "entries/fsync")
	}
}

// BenchmarkBaseline_BoltPutFsync is the baseline: one bbolt Put committed
// (and fsync'ed) per operation, on the same disk, in the same run.
func BenchmarkBaseline_BoltPutFsync(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "base.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	bucket := []byte("b")
	val := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists(bucket)
			if err != nil {
				return err
			}
			return bk.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), val)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
