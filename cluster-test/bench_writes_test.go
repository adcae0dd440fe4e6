package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// The write-path benchmarks (issue 10) run a 3-node in-process cluster on
// loopback with fsync'ed raft logs and the production raft timings
// (raftstore.DefaultRaftMultiplier: 500 ms heartbeat, 50 ms commit
// timeout), because the commit timeout is what a follower's write used
// to wait for. Every figure is printed beside a baseline measured on the
// same cluster in the same run: raw NOOP commits on the leader's
// raftstore (no MAP, no registry, no forwarding), with the same number of
// callers. Run them without -race:
//
//	go test -run '^$' -bench 'Writes|Connects' -benchtime 5s ./cluster-test/

// writeBenchCluster starts the cluster the write benchmarks share.
func writeBenchCluster(b *testing.B) *Cluster {
	b.Helper()
	return New(b, 3, WithLogLevel(slog.LevelWarn), WithNodeConfig(func(_ int, c *node.Config) {
		if err := c.Raft.SetRaftMultiplier(raftstore.DefaultRaftMultiplier); err != nil {
			b.Fatal(err)
		}
	}))
}

// BenchmarkWrites: committed writes (map/agents/update, one raft entry
// each) through MAP. Leader and Follower: one client, one write in
// flight, connected to the leader or to a follower (p50/p99 of the round
// trip). Spread64: 64 clients, one write in flight each, spread round-
// robin over the three nodes (writes/s and latency percentiles);
// Leader64 and Follower64 put all 64 on one node, to tell the forwarding
// cost from the commit cost.
func BenchmarkWrites(b *testing.B) {
	c := writeBenchCluster(b)
	leader := c.Leader(b)
	follower := c.Followers(b)[0]
	b.Run("Leader/map-update/clients=1", func(b *testing.B) {
		benchMAPWrites(b, c, []int{leader.Index})
	})
	b.Run("Follower/map-update/clients=1", func(b *testing.B) {
		benchMAPWrites(b, c, []int{follower.Index})
	})
	b.Run("baseline-raft-noop/proposers=1", func(b *testing.B) {
		benchNoops(b, leader.Store(), 1)
	})
	spread := make([]int, 64)
	for k := range spread {
		spread[k] = k % 3
	}
	b.Run("Spread64/map-update/clients=64", func(b *testing.B) {
		benchMAPWrites(b, c, spread)
	})
	on := func(i int) []int {
		n := make([]int, 64)
		for k := range n {
			n[k] = i
		}
		return n
	}
	b.Run("Leader64/map-update/clients=64", func(b *testing.B) {
		benchMAPWrites(b, c, on(leader.Index))
	})
	b.Run("Follower64/map-update/clients=64", func(b *testing.B) {
		benchMAPWrites(b, c, on(follower.Index))
	})
	b.Run("baseline-raft-noop/proposers=64", func(b *testing.B) {
		benchNoops(b, leader.Store(), 64)
	})
}

// benchAgentSeq numbers the agents of the write benchmarks.
var benchAgentSeq atomic.Int64

// benchMAPWrites connects one client per entry of nodes (to that node),
// registers one agent per client, then runs map/agents/update on b.Loop
// iterations spread over the clients, each client with one call in flight.
func benchMAPWrites(b *testing.B, c *Cluster, nodes []int) {
	clients := make([]*Client, len(nodes))
	agents := make([]string, len(nodes))
	for k, i := range nodes {
		clients[k] = c.Connect(b, i, map[string]any{"participantType": "system"})
		agents[k] = fmt.Sprintf("bw-%d", benchAgentSeq.Add(1))
		if err := clients[k].Register(agents[k], nil); err != nil {
			b.Fatalf("register: %s", Describe(err))
		}
	}
	states := []string{"busy", "idle"}
	runCallers(b, len(clients), func(w, n int) error {
		_, err := clients[w].Call("map/agents/update", map[string]any{"agentId": agents[w], "state": states[n%2]})
		return err
	})
}

// benchNoops commits NOOP entries directly on st (the leader's raftstore)
// from `proposers` goroutines.
func benchNoops(b *testing.B, st *raftstore.Store, proposers int) {
	runCallers(b, proposers, func(int, int) error {
		_, _, err := st.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{})
		return err
	})
}

// runCallers runs op once per b.Loop iteration on `callers` goroutines
// (each with one call in flight; runConcurrent) and reports writes/s,
// p50/p99 latency in ms and failures.
func runCallers(b *testing.B, callers int, op func(caller, n int) error) {
	b.Helper()
	lat := make([][]time.Duration, callers)
	var failed atomic.Int64
	runConcurrent(b, callers, func(w, n int) {
		start := time.Now()
		if err := op(w, n); err != nil {
			failed.Add(1)
			return
		}
		lat[w] = append(lat[w], time.Since(start))
	}, "writes/s")
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	p50, p99 := percentiles(all)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	reportFailures(b, failed.Load())
}

// BenchmarkConnects_Follower: b.N WebSocket connections, each with one
// map/connect (a SESSION_OPEN raft entry), made through a follower by 64
// concurrent dialers and kept open (idle sessions); reports connects/s and
// the time 10,000 connects take at that rate. Beside it: the same through
// the leader. -benchtime 10000x gives the load.
func BenchmarkConnects_Follower(b *testing.B) {
	c := writeBenchCluster(b)
	leader := c.Leader(b)
	follower := c.Followers(b)[0]
	b.Run("follower/map-connect/dialers=64", func(b *testing.B) { benchConnects(b, c, follower, 64) })
	b.Run("baseline-leader/map-connect/dialers=64", func(b *testing.B) { benchConnects(b, c, leader, 64) })

}

func benchConnects(b *testing.B, c *Cluster, n *Node, dialers int) {
	var failed atomic.Int64
	var done atomic.Int64
	work := make(chan struct{}, dialers)
	var wg sync.WaitGroup
	for range dialers {
		wg.Go(func() {
			for range work {
				cl, err := Dial(b, n.MAPURL(), nil)
				if err == nil {
					cl.SetToken(c.Token())
					_, err = cl.Connect(map[string]any{"participantType": "system"})
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		})
	}
	stopProfile := burstProfile(b)
	start := time.Now()
	for b.Loop() {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	stopProfile()
	rate := float64(done.Load()) / elapsed.Seconds()
	// Logged too: a failed operation fails the benchmark, which then
	// prints no metrics, and the figure is still worth reading.
	b.Logf("%d connects in %v (%.0f/s), %d failed", done.Load(), elapsed.Round(time.Millisecond), rate, failed.Load())
	b.ReportMetric(rate, "connects/s")
	if rate > 0 {
		b.ReportMetric(10000/rate, "s/10k")
	}
	reportFailures(b, failed.Load())
}

// burstProfile writes a CPU profile of the measured loop only (not the
// cluster's start or teardown, which -cpuprofile includes) to the file
// CONCORD_BENCH_CPUPROFILE names, suffixed with the sub-benchmark's name;
// unset, it does nothing. Every node runs in this process, so the profile
// holds them all: read a follower's share by its call stacks.
func burstProfile(b *testing.B) (stop func()) {
	path := os.Getenv("CONCORD_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path + "." + strings.NewReplacer("/", "_", "=", "").Replace(b.Name()))
	if err != nil {
		b.Fatalf("create cpu profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatalf("start cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Errorf("close cpu profile: %v", err)
		}
	}
}
