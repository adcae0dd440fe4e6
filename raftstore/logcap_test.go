package raftstore

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applyNoops commits n NOOP entries from 8 concurrent proposers.
func applyNoops(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := testCtx(t) // one for all: each testCtx stays registered until cleanup
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if _, _, err := s.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// logSpan is how many entries the log store holds.
func logSpan(t *testing.T, s *Store) uint64 {
	first, err := s.bolt.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.bolt.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return last - first + 1
}

func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLogCap_BoundsLogBetweenTimerSnapshots: with raft's snapshot timer
// out of reach, the log, the bolt file that maps it and the heap stay
// bounded by MaxLogEntries + TrailingLogs however many entries are
// written; without the cap the log keeps every entry.
func TestLogCap_BoundsLogBetweenTimerSnapshots(t *testing.T) {
	const writes = 6000
	for _, capped := range []bool{true, false} {
		t.Run(fmt.Sprintf("capped=%v", capped), func(t *testing.T) {
			cfg := TestConfig(t, "n1")
			cfg.SnapshotInterval = time.Hour // only the cap may snapshot
			cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.MaxLogEntries = 200, 100, 500
			if !capped {
				cfg.MaxLogEntries = 0
			}
			s := StartTestStore(t, cfg)
			applyNoops(t, s, writes/3)
			heap1 := heapAfterGC()
			applyNoops(t, s, 2*writes/3)
			heap2 := heapAfterGC()
			// The cap's snapshot runs beside the writes: allow one batch of
			// writes past the cap while it is taken.
			bound := cfg.MaxLogEntries + cfg.TrailingLogs + uint64(cfg.MaxApplyBatch)
			var span uint64
			eventually(t, scaled(5*time.Second), func() error {
				if span = logSpan(t, s); capped && span > bound {
					return fmt.Errorf("log holds %d entries, want <= %d", span, bound)
				}
				return nil
			})
			st, _ := os.Stat(filepath.Join(cfg.DataDir, "raft.db"))
			t.Logf("after %d writes: log %d entries, raft.db %d KB, heap %d KB -> %d KB",
				writes, span, st.Size()>>10, heap1>>10, heap2>>10)
			if !capped && span < writes {
				t.Fatalf("without the cap the log holds %d entries, want all %d (the test would not see a missing cap)", span, writes)
			}
			if capped && st.Size() > 1<<20 {
				t.Fatalf("raft.db is %d bytes with the log capped at %d entries", st.Size(), bound)
			}
			// The Go heap holds no per-entry state either way (the entries
			// live in bolt's mapped file); 2 MiB is below what keeping 4000
			// entries of even 512 bytes would take.
			if heap2 > heap1+2<<20 {
				t.Fatalf("heap grew from %d to %d bytes over %d writes", heap1, heap2, 2*writes/3)
			}
		})
	}
}
