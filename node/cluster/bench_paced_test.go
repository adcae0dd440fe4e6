package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/concordmap/concord/raftstore"
)

// BenchmarkForwardedWritesPaced: one writer forwarding a write to an echo
// leader every 2 ms on the ForwardStream, as a non-voter forwards its
// clients' writes and read fences at a moderate rate: each write and
// reply travels alone, so what a connection does per DATA frame (flow
// control, grpc's BDP pings: window.go) shows in the CPU per write
// (cpu-µs/write, the process's: both ends). ns/op includes the pause.
func BenchmarkForwardedWritesPaced(b *testing.B) {
	hs := newHookStore("L", func(context.Context, []byte) (raftstore.ForwardReply, error) {
		return raftstore.ForwardReply{Index: 1, Result: []byte{}, HasResult: true}, nil
	})
	srv := startServer(b, quietConfig("L"), ServerDeps{Store: hs}, nil)
	fwd, err := NewForwarder(quietConfig("origin"), newResolver("L", srv.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer fwd.Close()
	cmd := numbered(1)
	ctx := context.Background()
	if _, err := fwd.Forward(ctx, "L", "", cmd); err != nil { // connect, open the stream
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		if _, err := fwd.Forward(ctx, "L", "", cmd); err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/write")
}
