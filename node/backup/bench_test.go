package backup_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/backup"
	"github.com/concordmap/concord/node/rpc"
)

// BenchmarkSnapshot_SaveRestore times `snapshot save` and `restore` of a
// dev node holding 2000 agents, beside its baseline measured in the same
// run: raft's own snapshot of the same state (Store.Snapshot), which save
// wraps (a barrier, the snapshot, streaming it over gRPC into a verified
// file).
func BenchmarkSnapshot_SaveRestore(b *testing.B) {
	srv := startDev(b)
	const agents, workers = 2000, 8
	conns := make([]*rpc.Conn, workers)
	for w := range conns {
		conns[w] = dial(b, srv)
		call(b, conns[w], "map/connect", map[string]any{"protocolVersion": 1, "participantType": "system"})
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < agents && errs[w] == nil; i += workers {
				_, errs[w] = c.Call(ctx, "map/agents/register", map[string]any{"agentId": fmt.Sprintf("a%05d", i)})
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	cc := adminConn(b, srv)
	file := filepath.Join(b.TempDir(), "bench.snap")
	var raftSnap, save, restore time.Duration
	var size int64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := srv.Store().Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
		raftSnap += time.Since(start)
		start = time.Now()
		info, err := backup.Save(ctx, cc, file)
		if err != nil {
			b.Fatal(err)
		}
		save += time.Since(start)
		size = info.Size
		start = time.Now()
		if _, err := backup.Restore(ctx, cc, file); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(raftSnap.Milliseconds())/n, "raft-snapshot-ms")
	b.ReportMetric(float64(save.Milliseconds())/n, "save-ms")
	b.ReportMetric(float64(restore.Milliseconds())/n, "restore-ms")
	b.ReportMetric(float64(size), "snapshot-bytes")
}
