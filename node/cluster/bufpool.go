package cluster

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Buffers gRPC encodes and receives messages in, on both sides of every
// node-to-node connection (the pool through experimental.BufferPool /
// WithBufferPool, the codec through ForceServerCodecV2 / ForceCodecV2:
// gRPC's own proto codec always uses the process-wide default pool).
// gRPC's default pool jumps from 32 KiB to 1 MiB and zeroes every buffer
// it hands out, so each relay batch (128 envelopes of a few hundred bytes)
// cost clearing 1 MiB on the sender and again on the receiver: 5% of a
// cross-node map/send's CPU. This pool has a class per power of two and
// does not zero: gRPC overwrites the length it asked for before anything
// reads it, and the bytes never leave the process.
const (
	minPoolShift = 8  // 256 B
	maxPoolShift = 22 // 4 MiB; larger buffers are not pooled
)

type grpcBufferPool struct {
	classes [maxPoolShift - minPoolShift + 1]sync.Pool
}

var grpcBuffers mem.BufferPool = &grpcBufferPool{}

// class returns the index of the smallest class holding n bytes, or -1.
func poolClass(n int) int {
	if n <= 1<<minPoolShift {
		return 0
	}
	shift := bits.Len(uint(n - 1))
	if shift > maxPoolShift {
		return -1
	}
	return shift - minPoolShift
}

// Get implements mem.BufferPool.
func (p *grpcBufferPool) Get(length int) *[]byte {
	c := poolClass(length)
	if c < 0 {
		b := make([]byte, length)
		return &b
	}
	if bp, ok := p.classes[c].Get().(*[]byte); ok {
		*bp = (*bp)[:length]
		return bp
	}
	b := make([]byte, length, 1<<(c+minPoolShift))
	return &b
}

// Put implements mem.BufferPool; buffers of other capacities are dropped.
func (p *grpcBufferPool) Put(bp *[]byte) {
	c := poolClass(cap(*bp))
	if c < 0 || cap(*bp) != 1<<(c+minPoolShift) {
		return
	}
	*bp = (*bp)[:0]
	p.classes[c].Put(bp)
}

// pooledCodec is gRPC's proto codec with grpcBuffers instead of the default
// pool. Small messages are marshalled into plain slices, as gRPC does.
type pooledCodec struct{}

var grpcCodec pooledCodec

func (pooledCodec) Name() string { return "proto" }

func (pooledCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("cluster: marshal %T: not a proto message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // safe: Size just ran
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	bp := grpcBuffers.Get(size)
	if _, err := opts.MarshalAppend((*bp)[:0], m); err != nil {
		grpcBuffers.Put(bp)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(bp, grpcBuffers)}, nil
}

func (pooledCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("cluster: unmarshal %T: not a proto message", v)
	}
	buf := data.MaterializeToBuffer(grpcBuffers)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
