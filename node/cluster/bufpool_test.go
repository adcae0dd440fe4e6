package cluster

import (
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestGRPCBufferPool_Classes(t *testing.T) {
	tests := []struct {
		length, wantCap int
	}{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {45 << 10, 64 << 10}, {64 << 10, 64 << 10},
		{4 << 20, 4 << 20}, {4<<20 + 1, 4<<20 + 1}, // past the largest class: exact, unpooled
	}
	p := &grpcBufferPool{}
	for _, tt := range tests {
		bp := p.Get(tt.length)
		if len(*bp) != tt.length || cap(*bp) != tt.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tt.length, len(*bp), cap(*bp), tt.length, tt.wantCap)
		}
		p.Put(bp)
	}
	// A returned buffer is handed out again for any length of its class.
	bp := p.Get(1000)
	(*bp)[0] = 42
	p.Put(bp)
	if again := p.Get(600); cap(*again) != 1024 {
		t.Fatalf("cap %d after reuse, want 1024", cap(*again))
	}
	// Foreign capacities are dropped, not pooled under a wrong class.
	odd := make([]byte, 10, 300)
	p.Put(&odd)
}

func TestPooledCodec_RoundTrip(t *testing.T) {
	msg := []byte(`{"id":"m","payload":"` + strings.Repeat("x", 300) + `"}`)
	for _, n := range []int{1, 200} { // below and above gRPC's pooling threshold
		batch := &concordv1.RelayBatch{FromNodeId: "n1"}
		for i := range n {
			batch.Envelopes = append(batch.Envelopes, &concordv1.RelayEnvelope{Seq: uint64(i + 1), Message: msg, RecipientAgentId: "a"})
		}
		data, err := grpcCodec.Marshal(batch)
		if err != nil {
			t.Fatal(err)
		}
		// The receiver gets the bytes in pieces, as HTTP/2 frames deliver them.
		flat := data.Materialize()
		data.Free()
		var parts mem.BufferSlice
		for len(flat) > 0 {
			k := min(len(flat), 16<<10)
			parts = append(parts, mem.SliceBuffer(flat[:k]))
			flat = flat[k:]
		}
		var got concordv1.RelayBatch
		if err := grpcCodec.Unmarshal(parts, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(batch, &got) {
			t.Fatalf("%d envelopes: round trip differs", n)
		}
	}
	if _, err := grpcCodec.Marshal("not a message"); err == nil {
		t.Fatal("marshalled a string")
	}
}
