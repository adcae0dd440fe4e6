package federation

import (
	"context"
	"fmt"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// putGuaranteed stores guaranteed messages with the given ids in the
// outbox to dc2, the stream being down (each is answered "queued").
func putGuaranteed(t *testing.T, m *Manager, ol *outLink, ids ...string) {
	t.Helper()
	for _, id := range ids {
		ch := make(chan Outcome, 1)
		env := &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "dc2", MaxHops: 5, MessageId: id, From: "alice", ToAgent: "bob"}
		Stamp(env, "dc1")
		m.sendGuaranteed(env, ol, func(o Outcome) { ch <- o })
		if o := <-ch; !o.Queued {
			t.Fatalf("send %s: %+v", id, o)
		}
	}
}

// drained flushes ol once and returns the outbox seqs it sent, per batch.
func drained(t *testing.T, ol *outLink) [][]uint64 {
	t.Helper()
	var rec batchRecorder
	if err := ol.flush(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
	var out [][]uint64
	for _, b := range rec.batches {
		var seqs []uint64
		for _, env := range b {
			seqs = append(seqs, env.GetGuaranteedSeq())
		}
		out = append(out, seqs)
	}
	return out
}

// TestOutLink_GuaranteedDrainStopsAtAHeldMessage: the own stream sends
// the outbox only up to the first held message (refused retryably, or
// after a failed relay call): nothing after it goes until it does, then
// it and what follows go in order, batched; messages in flight or
// answered are passed over, not waited for.
func TestOutLink_GuaranteedDrainStopsAtAHeldMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(ol *outLink, sent map[uint64]uint64) // holds outbox seq 2
	}{
		{"refused retryably", func(ol *outLink, sent map[uint64]uint64) {
			ol.acked([]*concordv1.FedAck{{Seq: sent[1], Delivered: []string{"dc2:agent:bob"}}, {Seq: sent[2], Code: CodeUnavailable}})
		}},
		{"failed relay", func(ol *outLink, sent map[uint64]uint64) {
			ol.acked([]*concordv1.FedAck{{Seq: sent[1], Delivered: []string{"dc2:agent:bob"}}})
			ol.mu.Lock() // as relayOnce leaves a call that failed after sending
			ol.gsent[2] = gsend{until: ol.m.now().Add(5 * ol.m.cfg.BackoffMin), held: true}
			ol.mu.Unlock()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, clk := testManager(t, "dc1", "dc2", nil)
			l, _ := m.deps.State.Link("dc2")
			ol := newOutLink(m, l)
			putGuaranteed(t, m, ol, "a", "b", "c")
			var rec batchRecorder
			if err := ol.flush(context.Background(), &rec); err != nil || len(rec.batches) != 1 || len(rec.batches[0]) != 3 {
				t.Fatalf("first drain: %v %v", rec.batches, err)
			}
			sent := map[uint64]uint64{} // outbox seq -> stream seq
			for _, env := range rec.batches[0] {
				sent[env.GetGuaranteedSeq()] = env.GetSeq()
			}
			tc.hold(ol, sent)
			ol.commitAcks(context.Background())
			putGuaranteed(t, m, ol, "d", "e") // seqs 4, 5; 3 is still in flight

			if got := drained(t, ol); len(got) != 0 {
				t.Fatalf("with 2 held the stream sent %v, want nothing", got)
			}
			clk.add(4 * m.cfg.BackoffMin)
			if got := drained(t, ol); len(got) != 0 {
				t.Fatalf("before the pause ended the stream sent %v, want nothing", got)
			}
			clk.add(2 * m.cfg.BackoffMin)
			// 2 is due again: it and what follows, except 3 (in flight), go as one batch.
			if got := drained(t, ol); fmt.Sprint(got) != "[[2 4 5]]" {
				t.Fatalf("after the pause the stream sent %v, want [[2 4 5]]", got)
			}
			if got := drained(t, ol); len(got) != 0 {
				t.Fatalf("in-flight messages sent again: %v", got)
			}
		})
	}
}

// TestOutLink_GuaranteedPick: the drain's rule per outbox seq.
func TestOutLink_GuaranteedPick(t *testing.T) {
	now := time.Unix(1000, 0)
	ol := &outLink{gsent: map[uint64]gsend{
		1: {until: now.Add(time.Second)},              // in flight
		2: {until: now.Add(-time.Second)},             // ack overdue: resend
		3: {until: now.Add(time.Second), held: true},  // held
		4: {until: now.Add(-time.Second), held: true}, // pause over
		5: {until: now.Add(time.Hour)},                // answered, ack being stored
	}}
	pick := ol.gpick(now)
	for _, tc := range []struct {
		seq        uint64
		take, stop bool
	}{{1, false, false}, {2, true, false}, {3, false, true}, {4, true, false}, {5, false, false}, {6, true, false}} {
		if take, stop := pick(tc.seq); take != tc.take || stop != tc.stop {
			t.Errorf("seq %d: take %v stop %v, want %v %v", tc.seq, take, stop, tc.take, tc.stop)
		}
	}
}
