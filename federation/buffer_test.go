package federation

import (
	"context"
	"slices"
	"strconv"
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
	if got := b.takeAll(); len(got) != 2 || len(b.items) != 0 || b.bytes != 0 {
		t.Fatal("takeAll did not empty the buffer in one piece")
	}
}

// TestOutLink_EnqueueWhileDown: with no stream up, senders hear "queued"
// until the link's buffer policy refuses (reject-new: 5000, retryable);
// stop tells nobody twice and refuses later sends.
func TestOutLink_EnqueueWhileDown(t *testing.T) {
	m := &Manager{now: time.Now, log: discardLogger()}
	pol, err := BufferPolicyOr(&concordv1.FedBufferPolicy{MaxMessages: 2, Overflow: concordv1.FedOverflow_FED_OVERFLOW_REJECT_NEW})
	if err != nil {
		t.Fatal(err)
	}
	l := newOutLink(m, &concordv1.FedLink{PeerSystemId: "dc2", PeerAddrs: []string{"x"}, Buffer: pol})
	var got []Outcome
	for range 3 {
		l.enqueue(&concordv1.FedEnvelope{MessageId: "m"}, func(o Outcome) { got = append(got, o) })
	}
	if !got[0].Queued || !got[1].Queued || got[2].Err == nil || got[2].Err.Code != CodeUnavailable {
		t.Fatalf("outcomes %+v", got)
	}
	l.stop(codeErr(CodeSystemNotFound, "gone", nil))
	l.enqueue(&concordv1.FedEnvelope{}, func(o Outcome) { got = append(got, o) })
	if len(got) != 4 || got[3].Err == nil || got[3].Err.Code != CodeSystemNotFound {
		t.Fatalf("after stop: %+v", got)
	}
	if _, err := BufferPolicyOr(&concordv1.FedBufferPolicy{MaxAgeMs: -1}); err == nil {
		t.Fatal("negative age accepted")
	}
}

// batchRecorder is the part of a Link client stream flush uses.
type batchRecorder struct {
	concordv1.Federation_LinkClient
	batches [][]*concordv1.FedEnvelope
}

func (b *batchRecorder) Send(f *concordv1.FedFrame) error {
	b.batches = append(b.batches, f.GetBatch().GetEnvelopes())
	return nil
}

// TestOutLink_FlushBatches: the buffer drains in order, in batches of at
// most maxBatch envelopes and maxBatchBytes (a larger envelope alone).
func TestOutLink_FlushBatches(t *testing.T) {
	m := &Manager{now: time.Now, log: discardLogger(), deps: Deps{IsLeader: func() bool { return false }}}
	pol, _ := BufferPolicyOr(&concordv1.FedBufferPolicy{MaxBytes: 64 << 20})
	l := newOutLink(m, &concordv1.FedLink{PeerSystemId: "dc2", PeerAddrs: []string{"x"}, Buffer: pol})
	l.up = true
	sizes := []int{10, 10, 3 << 20, 3 << 20, 5 << 20, 10}
	for range 70 {
		sizes = append(sizes, 10)
	}
	for i, sz := range sizes {
		l.enqueue(&concordv1.FedEnvelope{MessageId: strconv.Itoa(i), Payload: make([]byte, sz)}, func(Outcome) {})
	}
	var rec batchRecorder
	if err := l.flush(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
	next := 0
	for bi, b := range rec.batches {
		total := 0
		for _, e := range b {
			if e.GetMessageId() != strconv.Itoa(next) || e.GetSeq() != uint64(next+1) {
				t.Fatalf("batch %d: envelope %s (seq %d) out of order, want %d", bi, e.GetMessageId(), e.GetSeq(), next)
			}
			next++
			total += len(e.GetPayload())
		}
		if len(b) > maxBatch || (len(b) > 1 && total > maxBatchBytes) {
			t.Fatalf("batch %d: %d envelopes, %d bytes", bi, len(b), total)
		}
	}
	if next != len(sizes) || len(l.inflight) != len(sizes) {
		t.Fatalf("flushed %d of %d, %d in flight", next, len(sizes), len(l.inflight))
	}
}
