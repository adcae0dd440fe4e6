package federation

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestOutLink_RelaySendsInOrderAndReturnsThePeersAcks: a relay node
// refuses while its stream is down; with it up the leader's messages go
// first, in order, and each call hears the peer's own ack (duplicate
// included) keyed by outbox seq.
func TestOutLink_RelaySendsInOrderAndReturnsThePeersAcks(t *testing.T) {
	m, _, _ := testManager(t, "dc1", "dc2", nil)
	l, _ := m.deps.State.Link("dc2")
	ol := newOutLink(m, l)
	envs := []*concordv1.FedEnvelope{guaranteedEnv(0, 5, "bob"), guaranteedEnv(0, 6, "bob")}
	if _, err := ol.relay(context.Background(), envs); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("relay with the stream down: %v, want FailedPrecondition", err)
	}

	ol.up = true
	type result struct {
		acks []*concordv1.FedAck
		err  error
	}
	res := make(chan result, 1)
	go func() {
		acks, err := ol.relay(context.Background(), envs)
		res <- result{acks, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ol.mu.Lock()
		n := len(ol.relayQ)
		ol.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay call never queued its messages")
		}
		time.Sleep(time.Millisecond)
	}
	ol.buf.items = append(ol.buf.items, &item{env: guaranteedEnv(0, 0, "carol"), size: 10, at: m.now()})
	var rec batchRecorder
	if err := ol.flush(context.Background(), &rec); err != nil || len(rec.batches) != 1 || len(rec.batches[0]) != 3 {
		t.Fatalf("flush: %v %v", rec.batches, err)
	}
	b := rec.batches[0]
	if b[0].GetGuaranteedSeq() != 5 || b[1].GetGuaranteedSeq() != 6 || b[2].GetToAgent() != "carol" || b[0].GetSeq() >= b[1].GetSeq() {
		t.Fatalf("sent %v, want the relayed 5 and 6 first, then the buffer", b)
	}
	ol.acked([]*concordv1.FedAck{{Seq: b[0].GetSeq(), Duplicate: true}, {Seq: b[1].GetSeq(), Code: CodeUnavailable, Message: "later"}})
	r := <-res
	if r.err != nil || len(r.acks) != 2 || r.acks[0].GetSeq() != 5 || !r.acks[0].GetDuplicate() ||
		r.acks[1].GetSeq() != 6 || r.acks[1].GetCode() != CodeUnavailable {
		t.Fatalf("relay answered %v %v", r.acks, r.err)
	}
}

// TestOutLink_RelayBatchIsAPrefix: the leader relays the outbox oldest
// first and stops at a message not due yet, so a relay call never
// overtakes one still on its way.
func TestOutLink_RelayBatchIsAPrefix(t *testing.T) {
	m, _, clk := testManager(t, "dc1", "dc2", nil)
	l, _ := m.deps.State.Link("dc2")
	ol := newOutLink(m, l)
	putGuaranteed(t, m, ol, "a", "b", "c")
	ol.mu.Lock()
	ol.gsent[2] = gsend{until: clk.now().Add(time.Second), held: true} // b: refused retryably, due later
	got := ol.relayBatch()
	ol.mu.Unlock()
	if len(got) != 1 || got[0].GetMessageId() != "a" || got[0].GetGuaranteedSeq() != 1 || got[0].GetGuaranteedFloor() != 1 {
		t.Fatalf("relay batch %v, want only a", got)
	}
	ol.mu.Lock()
	delete(ol.gsent, 1)
	clk.add(2 * time.Second)
	got = ol.relayBatch()
	ol.mu.Unlock()
	if len(got) != 3 || got[0].GetMessageId() != "a" || got[1].GetMessageId() != "b" || got[2].GetMessageId() != "c" {
		t.Fatalf("relay batch after the pause %v, want a, b, c", got)
	}
}
