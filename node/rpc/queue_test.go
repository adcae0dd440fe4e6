package rpc

import (
	"context"
	"errors"
	"testing"
)

// TestSendQueue_NotifyBytesBound: notifications stop at NotifyQueueBytes
// (the subscriber drop policy takes over) while replies still get room up
// to SendQueueBytes.
func TestSendQueue_NotifyBytesBound(t *testing.T) {
	q := newSendQueue(1000, 1000, 300)
	q.startWriter = func() {} // no writer: the test inspects the queue
	mk := func(n int) *frame {
		f := getFrame()
		f.b = append(f.b[:0], make([]byte, n)...)
		return f
	}
	for i := range 3 {
		if err := q.tryPut(mk(100)); err != nil {
			t.Fatalf("notification %d: %v", i, err)
		}
	}
	if err := q.tryPut(mk(100)); !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("notification past NotifyQueueBytes: %v, want ErrSlowConsumer", err)
	}
	for i := range 7 {
		if err := q.put(context.Background(), mk(100)); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	if q.bytes != 1000 {
		t.Fatalf("queued %d bytes, want 1000", q.bytes)
	}
	q.drop()
	if err := q.tryPut(mk(5000)); err != nil {
		t.Fatalf("one notification into an empty queue must pass whatever its size: %v", err)
	}
}
