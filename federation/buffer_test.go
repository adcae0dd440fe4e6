package federation

import (
	"slices"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestBuffer_Overflow(t *testing.T) {
	now := time.Unix(1000, 0)
	mk := func(id string) *item {
		env := &concordv1.FedEnvelope{MessageId: id}
		return &item{env: env, size: 10, at: now}
	}
	ids := func(b *buffer) (out []string) {
		for _, it := range b.items {
			out = append(out, it.env.GetMessageId())
		}
		return out
	}
	tests := []struct {
		overflow concordv1.FedOverflow
		want     []string
		refused  bool
		dropped  uint64
	}{
		{concordv1.FedOverflow_FED_OVERFLOW_DROP_OLDEST, []string{"b", "c"}, false, 1},
		{concordv1.FedOverflow_FED_OVERFLOW_DROP_NEWEST, []string{"a", "b"}, true, 1},
		{concordv1.FedOverflow_FED_OVERFLOW_REJECT_NEW, []string{"a", "b"}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.overflow.String(), func(t *testing.T) {
			p := &concordv1.FedBufferPolicy{MaxMessages: 2, MaxBytes: 1000, Overflow: tt.overflow}
			var b buffer
			for _, id := range []string{"a", "b"} {
				if _, err := b.push(mk(id), p, now); err != nil {
					t.Fatal(err)
				}
			}
			_, err := b.push(mk("c"), p, now)
			if (err != nil) != tt.refused || (err != nil && err.Code != CodeUnavailable) {
				t.Fatalf("push c: %v", err)
			}
			if got := ids(&b); !slices.Equal(got, tt.want) || b.dropped != tt.dropped {
				t.Fatalf("buffer %v dropped %d, want %v dropped %d", got, b.dropped, tt.want, tt.dropped)
			}
		})
	}
}

func TestBuffer_BytesAndAge(t *testing.T) {
	now := time.Unix(1000, 0)
	p := &concordv1.FedBufferPolicy{MaxMessages: 100, MaxBytes: 25, MaxAgeMs: 1000, Overflow: concordv1.FedOverflow_FED_OVERFLOW_DROP_OLDEST}
	var b buffer
	for i, at := range []time.Time{now.Add(-2 * time.Second), now, now} {
		it := &item{env: &concordv1.FedEnvelope{Seq: uint64(i)}, size: 10, at: at}
		if _, err := b.push(it, p, now); err != nil {
			t.Fatal(err)
		}
	}
	// The first aged out on the third push; the byte bound holds two.
	if len(b.items) != 2 || b.bytes != 20 || b.items[0].env.GetSeq() != 1 {
		t.Fatalf("items %d bytes %d", len(b.items), b.bytes)
	}
	if _, err := b.push(&item{env: &concordv1.FedEnvelope{}, size: 30, at: now}, p, now); err == nil {
		t.Fatal("a message larger than the whole buffer was accepted")
	}
	got := b.takeAll()
	b.pushFront(got)
	if len(b.items) != len(got) || b.bytes != 0+sizeOf(got) {
		t.Fatal("pushFront lost items")
	}
}

func sizeOf(items []*item) (n int) {
	for _, it := range items {
		n += it.size
	}
	return n
}
