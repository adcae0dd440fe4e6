package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// benchPayload is a ~200-byte message payload.
var benchPayload = strings.Repeat("x", 200)

// BenchmarkRouting_CrossNode: messages per second from one agent on node 1
// to one agent on node 2 over MAP (map/send requests pipelined by 256
// goroutines on the sender's one connection; each answers after the
// receiving node acknowledged delivery), beside the baseline of a raw gRPC
// bidirectional stream on loopback carrying the same message bytes in
// batches of 64 (the transport the relay uses, without MAP, routing or
// acknowledgements per message).
func BenchmarkRouting_CrossNode(b *testing.B) {
	b.Run("map-send/pipelined=256", func(b *testing.B) {
		c := New(b, 2, WithLogLevel(slog.LevelWarn))
		src := agentOn(b, c, 0, "src", nil)
		dst := agentOn(b, c, 1, "dst", nil)
		c.RequireConverged(b)
		var failed atomic.Int64
		params := map[string]any{"to": map[string]any{"agent": "dst"}, "payload": benchPayload}
		runConcurrent(b, 256, func(_, _ int) {
			if res, err := src.Send(params); err != nil || len(res.Delivered) != 1 {
				failed.Add(1)
			}
		}, "msgs/s")
		reportFailures(b, failed.Load())
		// Every acknowledged message reached the receiver.
		sent := int(b.N) - int(failed.Load())
		if err := dst.in.wait(DeliveryTimeout, func() error {
			if got := len(dst.Messages()); got < sent {
				return fmt.Errorf("receiver has %d of %d messages", got, sent)
			}
			return nil
		}); err != nil {
			b.Error(err)
		}
	})
	// Same-node map/send: the MAP cost without the relay, to locate where a
	// cross-node message spends its time.
	b.Run("reference-same-node-map-send/pipelined=256", func(b *testing.B) {
		c := New(b, 2, WithLogLevel(slog.LevelWarn))
		src := agentOn(b, c, 0, "src", nil)
		agentOn(b, c, 0, "dst", nil)
		var failed atomic.Int64
		params := map[string]any{"to": map[string]any{"agent": "dst"}, "payload": benchPayload}
		runConcurrent(b, 256, func(_, _ int) {
			if res, err := src.Send(params); err != nil || len(res.Delivered) != 1 {
				failed.Add(1)
			}
		}, "msgs/s")
		reportFailures(b, failed.Load())
	})
	b.Run("baseline-raw-grpc-stream/batch=64", benchRawStream)
}

// rawRelay is a Cluster service that only counts relayed envelopes and
// acknowledges each batch.
type rawRelay struct {
	concordv1.UnimplementedClusterServer
	got atomic.Int64
}

func (r *rawRelay) Relay(s concordv1.Cluster_RelayServer) error {
	for {
		batch, err := s.Recv()
		if err != nil {
			return nil
		}
		r.got.Add(int64(len(batch.GetEnvelopes())))
		envs := batch.GetEnvelopes()
		if err := s.Send(&concordv1.RelayAck{UpToSeq: envs[len(envs)-1].GetSeq()}); err != nil {
			return nil
		}
	}
}

func benchRawStream(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	relay := &rawRelay{}
	concordv1.RegisterClusterServer(srv, relay)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-served }()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := concordv1.NewClusterClient(conn).Relay(ctx)
	if err != nil {
		b.Fatal(err)
	}
	acks := make(chan struct{})
	go func() { // drain acks until the stream ends
		defer close(acks)
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	msg := []byte(`{"id":"01JBENCHMARKMESSAGE000000","from":"src","to":{"agent":"dst"},"payload":"` + benchPayload + `","meta":{"timestamp":1730000000000}}`)
	batch := &concordv1.RelayBatch{FromNodeId: "n1"}
	start := time.Now()
	var n uint64
	for b.Loop() {
		n++
		batch.Envelopes = append(batch.Envelopes, &concordv1.RelayEnvelope{
			Seq: n, Kind: concordv1.RelayKind_RELAY_KIND_MESSAGE, Message: msg, RecipientAgentId: "dst",
		})
		if len(batch.Envelopes) == 64 {
			if err := stream.Send(batch); err != nil {
				b.Fatal(err)
			}
			batch = &concordv1.RelayBatch{FromNodeId: "n1"}
		}
	}
	if len(batch.Envelopes) > 0 {
		if err := stream.Send(batch); err != nil {
			b.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	for relay.got.Load() < int64(n) {
		time.Sleep(time.Millisecond) // the server is still counting the tail
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	<-acks
}
