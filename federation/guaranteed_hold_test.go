package federation

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// secondServer is another server of m's system: its own manager (node
// id, local takes) over the same replicated state, store, deliverer and
// clock.
func secondServer(t *testing.T, m *Manager, d *countingDeliverer) *Manager {
	t.Helper()
	cfg := m.cfg
	cfg.NodeID = cfg.SystemID + "-2"
	m2, err := New(cfg, Deps{State: m.deps.State, Store: m.deps.Store, IsLeader: func() bool { return false }, Local: oneAgent{},
		Deliver: d, Servers: m.deps.Servers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.stopGuaranteed)
	return m2
}

// TestInbound_GuaranteedResendThroughAnotherServer: a guaranteed message
// delivered on one server whose inbox mark has not committed yet is
// resent through another server (a new leader's stream after the old
// one's was killed, or a relay): the second server refuses it
// retryably instead of delivering it again, answers "duplicate" once the
// mark committed, and takes over a hold whose server never marked it
// (died) once the hold lapsed.
func TestInbound_GuaranteedResendThroughAnotherServer(t *testing.T) {
	m, d, clk := testManager(t, "dc2", "dc1", nil)
	m2 := secondServer(t, m, d)
	ctx := context.Background()
	a := newInStream(m, "dc1", 0, nil)  // the old leader's stream
	b := newInStream(m2, "dc1", 0, nil) // the new leader's

	deliverNow(ctx, a, guaranteedEnv(1, 1, "bob"))
	deliverNow(ctx, a, guaranteedEnv(2, 2, "bob"))
	if d.count("bob") != 2 {
		t.Fatalf("%d deliveries on the first server, want 2", d.count("bob"))
	}
	deliverNow(ctx, b, guaranteedEnv(1, 1, "bob")) // the resend, marks of 1 and 2 still on their way
	if acks := b.takeAcks(); len(acks) != 1 || acks[0].GetCode() != CodeUnavailable || d.count("bob") != 2 {
		t.Fatalf("resend through another server before the mark: %v, %d deliveries (want one 5000, 2)", acks, d.count("bob"))
	}
	if acks := mustMark(t, a); len(acks) != 2 {
		t.Fatalf("acks of the first server: %v", acks)
	}
	deliverNow(ctx, b, guaranteedEnv(2, 1, "bob"))
	deliverNow(ctx, b, guaranteedEnv(3, 2, "bob"))
	for i, acks := 0, b.takeAcks(); i < 2; i++ {
		if len(acks) != 2 || !acks[i].GetDuplicate() {
			t.Fatalf("resends after the mark: %v, want two duplicates", acks)
		}
	}

	// Seq 3 held by a server that died before marking it: refused until
	// its hold lapses, then delivered here.
	deliverNow(ctx, a, guaranteedEnv(4, 3, "bob"))
	deliverNow(ctx, b, guaranteedEnv(4, 3, "bob"))
	if acks := b.takeAcks(); len(acks) != 1 || acks[0].GetCode() != CodeUnavailable || d.count("bob") != 3 {
		t.Fatalf("seq held by a silent server: %v, %d deliveries", acks, d.count("bob"))
	}
	clk.add(m.cfg.AckTimeout + time.Millisecond)
	deliverNow(ctx, b, guaranteedEnv(5, 3, "bob"))
	if d.count("bob") != 4 {
		t.Fatalf("a lapsed hold kept its seq: %d deliveries, want 4", d.count("bob"))
	}
	if acks := mustMark(t, b); len(acks) != 1 || acks[0].GetCode() != 0 {
		t.Fatalf("acks of the taking-over server: %v", acks)
	}
}

// TestState_InboxTakes: who holds an inbox seq, as holds, renewals,
// lapses and marks change it, and that a snapshot keeps the holds.
func TestState_InboxTakes(t *testing.T) {
	s := NewState()
	if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
		t.Fatal(err)
	}
	take := func(holder string, now, until int64, seqs ...uint64) *concordv1.FedInboxMark {
		return &concordv1.FedInboxMark{SourceSystemId: "dc1", TakeSeqs: seqs, Holder: holder, NowMs: now, UntilMs: until}
	}
	steps := []struct {
		name       string
		cmd        *concordv1.FedInboxMark
		seq        uint64
		holder     string
		until      int64
		recordedAt bool
	}{
		{"a takes", take("a", 0, 100, 1, 2), 1, "a", 100, false},
		{"b refused while a holds", take("b", 50, 150, 1), 1, "a", 100, false},
		{"a renews", take("a", 60, 160, 1), 1, "a", 160, false},
		{"b takes a lapsed hold", take("b", 160, 260, 1), 1, "b", 260, false},
		{"a mark ends the hold", &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{1}}, 1, "", 0, true},
		{"a recorded seq is not taken", take("b", 300, 400, 1), 1, "", 0, true},
		{"a take is not a mark", take("c", 300, 400, 5), 5, "c", 400, false},
		{"the floor passing ends holds", &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: []uint64{2}, Floor: 6}, 2, "", 0, true},
	}
	for _, st := range steps {
		if err := apply(t, s, cmdMark, st.cmd); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		h, until := s.InboxHolder("dc1", st.seq)
		if h != st.holder || until != st.until || s.InboxDone("dc1", st.seq) != st.recordedAt {
			t.Fatalf("%s: seq %d held by %q until %d, recorded %v", st.name, st.seq, h, until, s.InboxDone("dc1", st.seq))
		}
	}
	if h, _ := s.InboxHolder("dc1", 5); h != "" {
		t.Fatalf("seq 5 below the floor still held by %q", h)
	}

	if err := apply(t, s, cmdMark, take("d", 0, 99, 7)); err != nil {
		t.Fatal(err)
	}
	restored := roundTrip(t, s)
	if h, until := restored.InboxHolder("dc1", 7); h != "d" || until != 99 {
		t.Fatalf("restored state: seq 7 held by %q until %d", h, until)
	}
}

// countingStore counts the holds (takes) it applies.
type countingStore struct {
	fsmStore
	mu    sync.Mutex
	holds int
}

func (c *countingStore) Apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	if mark, ok := msg.(*concordv1.FedInboxMark); ok && len(mark.GetTakeSeqs()) > 0 {
		c.mu.Lock()
		c.holds++
		c.mu.Unlock()
	}
	return c.fsmStore.Apply(ctx, t, msg)
}

// TestInbound_GuaranteedHoldBatchAndRelease: one hold covers the
// guaranteed messages waiting on the stream (one Raft commit per batch,
// not per message), and what a stream held but did not deliver is
// released when its sequencer stops, so another server's resend is
// delivered at once rather than after the hold lapsed.
func TestInbound_GuaranteedHoldBatchAndRelease(t *testing.T) {
	m, d, _ := testManager(t, "dc2", "dc1", nil)
	store := &countingStore{fsmStore: fsmStore{m.deps.State}}
	m.deps.Store = store
	m2 := secondServer(t, m, d)
	a := newInStream(m, "dc1", 0, nil)
	b := newInStream(m2, "dc1", 0, nil)
	ctx := context.Background()

	link, _ := m.deps.State.Link("dc1")
	for q := uint64(2); q <= 4; q++ {
		a.enqueueGuaranteed(gjob{env: guaranteedEnv(q, q, "bob"), link: link, linked: true})
	}
	deliverNow(ctx, a, guaranteedEnv(1, 1, "bob"))
	for len(a.gnext) > 0 { // as the sequencer does
		j := a.gnext[0]
		a.gnext = a.gnext[1:]
		if j.env.GetGuaranteedSeq() == 4 {
			break // the stream ends before 4
		}
		a.deliverGuaranteed(ctx, j.env, j.link, j.linked)
	}
	if d.count("bob") != 3 || store.holds != 1 {
		t.Fatalf("%d deliveries with %d holds, want 3 with 1", d.count("bob"), store.holds)
	}
	if h, _ := m.deps.State.InboxHolder("dc1", 4); h != m.cfg.NodeID {
		t.Fatalf("seq 4 waiting on the stream held by %q", h)
	}
	mustMark(t, a)
	a.release()
	deliverNow(ctx, b, guaranteedEnv(1, 4, "bob"))
	if acks := mustMark(t, b); len(acks) != 1 || acks[0].GetCode() != 0 || d.count("bob") != 4 {
		t.Fatalf("resend of a released seq through another server: %v, %d deliveries", acks, d.count("bob"))
	}
}

// TestInbound_GuaranteedHoldAfterRelink: a relink between the order
// check and the hold (the hold names the old link's epoch and is
// refused) answers 5000 and ends the stream, as the check would have,
// rather than refusing the message for good.
func TestInbound_GuaranteedHoldAfterRelink(t *testing.T) {
	m, d, _ := testManager(t, "dc2", "dc1", nil)
	st := m.deps.State
	oldLink, _ := st.Link("dc1")
	old := newInStream(m, "dc1", oldLink.GetEpoch(), nil)
	ended := false
	old.end = func() { ended = true }
	if _, err := st.Apply(6, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
		t.Fatal(err)
	}
	a := old.hold(context.Background(), guaranteedEnv(1, 1, "bob"))
	if a.GetCode() != CodeUnavailable || !ended || d.count("bob") != 0 {
		t.Fatalf("hold on a replaced link: %v, ended %v, %d deliveries", a, ended, d.count("bob"))
	}
}
