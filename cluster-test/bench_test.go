package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Benchmarks print their figures beside a baseline measured in the same
// run (make bench). They use the in-process harness with FastConfig
// timings (which do not change the commit path) and real fsync'ed bolt
// logs on every node; run them without -race.

// BenchmarkCluster_CommitThroughput: Raft-committed writes per second on a
// 3-node cluster, with 256 MAP clients spread over the nodes registering
// agents (each register is one AGENT_REGISTER entry, committed by a
// quorum with fsync), beside the baseline of 256 goroutines committing
// NOOP entries directly on the leader's raftstore (no MAP, no registry,
// no forwarding).
func BenchmarkCluster_CommitThroughput(b *testing.B) {
	const clients = 256
	register := func(b *testing.B, opts ...Option) {
		c := New(b, 3, append([]Option{WithLogLevel(slog.LevelWarn)}, opts...)...)
		pool := make([]*Client, clients)
		for k := range pool {
			pool[k] = c.Connect(b, k%3, map[string]any{"participantType": "system"})
		}
		var failed atomic.Int64
		runConcurrent(b, clients, func(worker, op int) {
			if err := pool[worker].Register(fmt.Sprintf("w%d-%d", worker, op), nil); err != nil {
				failed.Add(1)
			}
		}, "writes/s")
		reportFailures(b, failed.Load())
	}
	b.Run(fmt.Sprintf("map-register/clients=%d", clients), func(b *testing.B) { register(b) })
	// The same without TLS on any port: what TLS costs on the write path.
	b.Run(fmt.Sprintf("reference-map-register/clients=%d/no-tls", clients), func(b *testing.B) { register(b, WithInsecure()) })
	b.Run(fmt.Sprintf("baseline-raft-noop/proposers=%d", clients), func(b *testing.B) {
		c := New(b, 3, WithLogLevel(slog.LevelWarn))
		st := c.Leader(b).Store()
		var failed atomic.Int64
		runConcurrent(b, clients, func(_, _ int) {
			if _, _, err := st.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{}); err != nil {
				failed.Add(1)
			}
		}, "writes/s")
		reportFailures(b, failed.Load())
	})
}

// BenchmarkCluster_CommitLatency: one client registering agents one after
// the other through the leader's MAP endpoint (p50/p99 of the map/agents/
// register round trip), beside one goroutine committing NOOPs on the
// leader's raftstore.
func BenchmarkCluster_CommitLatency(b *testing.B) {
	b.Run("map-register/client=1", func(b *testing.B) {
		c := New(b, 3, WithLogLevel(slog.LevelWarn))
		cl := c.Connect(b, c.Leader(b).Index, map[string]any{"participantType": "system"})
		n := 0
		reportLatency(b, func() error {
			n++
			return cl.Register(fmt.Sprintf("lat-%d", n), nil)
		})
	})
	b.Run("baseline-raft-noop/proposer=1", func(b *testing.B) {
		c := New(b, 3, WithLogLevel(slog.LevelWarn))
		st := c.Leader(b).Store()
		reportLatency(b, func() error {
			_, _, err := st.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{})
			return err
		})
	})
}

// runConcurrent runs op on `workers` goroutines, one call per b.Loop
// iteration (fed through a channel the size of the worker pool, so at
// most that many are queued), and reports completed calls per second as
// unit.
func runConcurrent(b *testing.B, workers int, op func(worker, op int), unit string) {
	b.Helper()
	work := make(chan int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := range work {
				op(w, n)
			}
		})
	}
	start, cpu := time.Now(), processCPU()
	n := 0
	for b.Loop() {
		work <- n
		n++
	}
	close(work)
	wg.Wait()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), unit)
	if n > 0 {
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(n), "cpu-us/op")
	}
}

// reportLatency times op once per b.Loop iteration and reports p50/p99.
func reportLatency(b *testing.B, op func() error) {
	b.Helper()
	var lat []time.Duration
	var failed int64
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			failed++
			continue
		}
		lat = append(lat, time.Since(start))
	}
	p50, p99 := percentiles(lat)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	reportFailures(b, failed)
}

func reportFailures(b *testing.B, failed int64) {
	b.ReportMetric(float64(failed), "failed")
	if failed > 0 {
		b.Errorf("%d operations failed", failed)
	}
}

// percentiles returns the 50th and 99th percentiles (nearest rank).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return at(0.50), at(0.99)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
