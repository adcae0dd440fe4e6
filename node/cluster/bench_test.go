package cluster

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// The relay benchmarks send 256-byte messages from node A to node B over
// loopback and report messages per second (msgs/s). Run them side by side:
//
//	go test -run '^$' -bench 'Relay|RawGRPC' -benchtime 2s ./node/cluster/
//
// BenchmarkRelayRouted goes through everything a routed message crosses
// between nodes: PeerStreams.Submit, the per-peer queue and sender goroutine,
// batching, the gRPC stream, the Server's Cluster.Relay handler calling a
// LocalDeliverer (counting), the ack, and the per-message completion.
// BenchmarkRawGRPCStreamBaseline is the floor: the same RelayBatch messages
// (128 envelopes of 256 bytes) on one raw bidi stream between the same
// kind of endpoints, with a receiver that only counts and acks.

const benchMsgSize = 256

var benchPayload = func() []byte {
	head := `{"id":"01J0000000000000000000000","from":"agent-a","to":{"agent":"agent-1"},"payload":"`
	return []byte(head + strings.Repeat("x", benchMsgSize-len(head)-2) + `"}`)
}()

// countingDeliverer counts what it is given.
type countingDeliverer struct{ n atomic.Int64 }

func (c *countingDeliverer) DeliverLocal(context.Context, *router.Envelope) error {
	c.n.Add(1)
	return nil
}

func quietConfig(id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	return cfg
}

// BenchmarkRelayRouted: pipelined senders (the deferred-response path of
// map/send) through PeerStreams.Submit.
func BenchmarkRelayRouted(b *testing.B) {
	cnt := &countingDeliverer{}
	srv := startServer(b, quietConfig("b"), ServerDeps{Store: &fakeStore{id: "b"}, Deliverer: cnt}, nil)
	res := newResolver("b", srv.addr)
	r := newTestPeerStreams(b, quietConfig("a"), res, res)
	env := &router.Envelope{Message: benchPayload, RecipientAgentID: "agent-1", RecipientSessionID: "s-1"}
	ctx := context.Background()
	if err := r.Send(ctx, "b", env); err != nil { // open the stream
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
		wg.Done()
	}
	b.SetBytes(benchMsgSize)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			wg.Add(1)
			r.Submit(ctx, "b", env, done)
		}
	})
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d messages failed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRelayRoutedSync: many senders each waiting for every ack
// (PeerStreams.Send, as the router calls it today).
func BenchmarkRelayRoutedSync(b *testing.B) {
	cnt := &countingDeliverer{}
	srv := startServer(b, quietConfig("b"), ServerDeps{Store: &fakeStore{id: "b"}, Deliverer: cnt}, nil)
	res := newResolver("b", srv.addr)
	r := newTestPeerStreams(b, quietConfig("a"), res, res)
	env := &router.Envelope{Message: benchPayload, RecipientAgentID: "agent-1", RecipientSessionID: "s-1"}
	ctx := context.Background()
	if err := r.Send(ctx, "b", env); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchMsgSize)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(256) // 256 × GOMAXPROCS concurrent map/send callers
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := r.Send(ctx, "b", env); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// rawServer is a Cluster service whose Relay stream handler only counts and acks.
type rawServer struct {
	concordv1.UnimplementedClusterServer
	n atomic.Int64
}

func (s *rawServer) Relay(stream concordv1.Cluster_RelayServer) error {
	for {
		batch, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		envs := batch.GetEnvelopes()
		s.n.Add(int64(len(envs)))
		if err := stream.Send(&concordv1.RelayAck{UpToSeq: envs[len(envs)-1].GetSeq()}); err != nil {
			return err
		}
	}
}

// BenchmarkRawGRPCStreamBaseline: one bidi stream, batches of 128, the
// same in-flight window as the relay, acks read by a second goroutine.
func BenchmarkRawGRPCStreamBaseline(b *testing.B) {
	cfg := quietConfig("a")
	lis := listen(b, "")
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(cfg.MaxMessageSize))
	concordv1.RegisterClusterServer(gs, &rawServer{})
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	defer func() { gs.Stop(); <-served }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := concordv1.NewClusterClient(cc).Relay(ctx)
	if err != nil {
		b.Fatal(err)
	}
	window := make(chan struct{}, cfg.RelayMaxInFlight/cfg.RelayMaxBatch) // batches in flight
	acked := make(chan struct{})
	total := b.N
	go func() {
		defer close(acked)
		var got uint64
		for got < uint64(total) {
			ack, err := stream.Recv()
			if err != nil {
				return
			}
			got = ack.GetUpToSeq()
			<-window
		}
	}()
	b.SetBytes(benchMsgSize)
	b.ReportAllocs()
	b.ResetTimer()
	seq := uint64(0)
	for sent := 0; sent < total; {
		n := min(cfg.RelayMaxBatch, total-sent)
		envs := make([]concordv1.RelayEnvelope, n)
		ptrs := make([]*concordv1.RelayEnvelope, n)
		for i := range envs {
			seq++
			envs[i].Seq, envs[i].Kind, envs[i].Message = seq, concordv1.RelayKind_RELAY_KIND_MESSAGE, benchPayload
			envs[i].RecipientAgentId, envs[i].RecipientSessionId = "agent-1", "s-1"
			ptrs[i] = &envs[i]
		}
		window <- struct{}{}
		if err := stream.Send(&concordv1.RelayBatch{FromNodeId: "a", Envelopes: ptrs}); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	<-acked
	b.StopTimer()
	_ = stream.CloseSend()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkForwardedWrites: 64 concurrent writers on a follower, each with
// one write in flight (issue 10's load), forwarded on the ForwardStream or
// with one unary Forward call each; run both and compare in one run:
//
//	go test -run '^$' -bench ForwardedWrites -benchtime 3s ./node/cluster/
//
// leader=echo answers at once (the forwarding cost alone); leader=raft is
// Store.Apply of a SESSION_OPEN on a follower of a real 3-node cluster
// (loopback, bolt logs in temporary directories, raft's production
// timings).
func BenchmarkForwardedWrites(b *testing.B) {
	for _, leader := range []string{"echo", "raft"} {
		for _, writers := range []int{1, 64} {
			for _, mode := range []string{"unary", "stream"} {
				b.Run(fmt.Sprintf("leader=%s/writers=%d/%s", leader, writers, mode), func(b *testing.B) {
					benchForwardedWrites(b, leader, mode, writers)
				})
			}
		}
	}
}

func benchForwardedWrites(b *testing.B, leader, mode string, writers int) {
	unary := func(c *Config) { c.ForwardUnaryOnly = mode == "unary" }
	var write func(ctx context.Context) error
	if leader == "echo" {
		hs := newHookStore("L", func(context.Context, []byte) (raftstore.ForwardReply, error) {
			return raftstore.ForwardReply{Index: 1, Result: []byte{}, HasResult: true}, nil
		})
		srv := startServer(b, quietConfig("L"), ServerDeps{Store: hs}, nil)
		cfg := quietConfig("origin")
		unary(&cfg)
		fwd, err := NewForwarder(cfg, newResolver("L", srv.addr))
		if err != nil {
			b.Fatal(err)
		}
		defer fwd.Close()
		cmd := numbered(1)
		write = func(ctx context.Context) error {
			_, err := fwd.Forward(ctx, "L", "", cmd)
			return err
		}
	} else {
		nodes, _ := newTestClusterWith(b, 3, true, func(c *Config) {
			unary(c)
			c.Logger = nil
		}, func(rc *raftstore.Config) {
			// Production timings: a busy shared host must not
			// look like a dead leader mid-run.
			def := raftstore.DefaultConfig()
			rc.HeartbeatTimeout, rc.ElectionTimeout = def.HeartbeatTimeout, def.ElectionTimeout
			rc.LeaderLeaseTimeout, rc.CommitTimeout = def.LeaderLeaseTimeout, def.CommitTimeout
			rc.Logger = nil
		})
		_, followers := leaderOf(b, nodes)
		st, node := followers[0].store, followers[0].id
		var n atomic.Int64
		write = func(ctx context.Context) error {
			_, _, err := st.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN,
				openSession(fmt.Sprintf("s-%d", n.Add(1)), node))
			return err
		}
	}
	ctx := context.Background()
	if err := write(ctx); err != nil { // connect, open the stream
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	if writers == 1 {
		for range b.N {
			if err := write(ctx); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := write(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
	// CPU per write (the whole process: every node, both sides) is what
	// bounds throughput on a saturated host, and unlike writes/s it hardly
	// moves with the other processes on a shared machine.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/write")
}

// processCPU is the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
