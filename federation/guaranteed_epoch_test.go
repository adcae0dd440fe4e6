package federation

import (
	"context"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestInbound_GuaranteedRelinkKey: after an unlink and a relink, a
// message of the old link still being delivered (taken, unfinished)
// neither holds back the new link's message with the same seq nor, once
// its mark resolves, clears the new link's entry or marks its inbox.
func TestInbound_GuaranteedRelinkKey(t *testing.T) {
	m, d, clk := testManager(t, "dc2", "dc1", nil)
	st := m.deps.State
	ctx := context.Background()
	oldLink, _ := st.Link("dc1")
	old := newInStream(m, "dc1", oldLink.GetEpoch(), nil)
	m.gmu.Lock()
	m.gactive[gkey{"dc1", old.epoch, 1}] = gentry{at: clk.now()} // being delivered
	m.gmu.Unlock()

	if _, err := st.Apply(5, &concordv1.FedLinkRemove{PeerSystemId: "dc1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(6, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
		t.Fatal(err)
	}
	cur := newInStream(m, "dc1", 6, nil)
	deliverNow(ctx, cur, guaranteedEnv(1, 1, "bob"))
	if a := cur.takeAcks(); len(a) != 0 || d.count("bob") != 1 {
		t.Fatalf("new link's seq 1 held back by the old link's: acks %v, %d deliveries", a, d.count("bob"))
	}

	// The old delivery ends and its mark resolves (the link it names is gone).
	if _, err := old.markAndAck(ctx, []gmark{{seq: 1, floor: 1, ack: &concordv1.FedAck{Seq: 1}}}); err != nil {
		t.Fatal(err)
	}
	m.gmu.Lock()
	_, curTaken := m.gactive[gkey{"dc1", 6, 1}]
	_, oldTaken := m.gactive[gkey{"dc1", old.epoch, 1}]
	m.gmu.Unlock()
	switch {
	case !curTaken || oldTaken:
		t.Fatalf("after the old mark: new link's entry %v, old link's %v", curTaken, oldTaken)
	case st.InboxDone("dc1", 1):
		t.Fatal("the old link's mark entered the new link's inbox")
	}
	deliverNow(ctx, cur, guaranteedEnv(2, 1, "bob")) // a resend while the new mark is pending
	if a := cur.takeAcks(); len(a) != 1 || a[0].GetCode() != CodeUnavailable || d.count("bob") != 1 {
		t.Fatalf("resend before the new link's mark: %v, %d deliveries", a, d.count("bob"))
	}
	if acks := mustMark(t, cur); len(acks) != 1 || !st.InboxDone("dc1", 1) {
		t.Fatalf("new link's mark: %v", acks)
	}
}

// TestInbound_GuaranteedStaleStreamAfterRelink: a stream opened on a link
// since replaced (a relink) delivers no guaranteed message (its mark
// would be dropped, so the message would be acknowledged with no record
// to dedupe a resend by): it answers 5000 and ends, and the stream of the
// new link delivers and records the message.
func TestInbound_GuaranteedStaleStreamAfterRelink(t *testing.T) {
	m, d, _ := testManager(t, "dc2", "dc1", nil)
	st := m.deps.State
	ctx := context.Background()
	oldLink, _ := st.Link("dc1")
	old := newInStream(m, "dc1", oldLink.GetEpoch(), nil)
	ended := false
	old.end = func() { ended = true }

	deliverNow(ctx, old, guaranteedEnv(1, 1, "bob"))
	if acks := mustMark(t, old); len(acks) != 1 || acks[0].GetCode() != 0 || ended {
		t.Fatalf("before the relink: acks %v, ended %v", acks, ended)
	}
	if _, err := st.Apply(6, &concordv1.FedLinkPut{Link: link("dc1")}); err != nil {
		t.Fatal(err)
	}
	deliverNow(ctx, old, guaranteedEnv(2, 1, "bob"))
	if a := old.takeAcks(); len(a) != 1 || a[0].GetCode() != CodeUnavailable || !ended || d.count("bob") != 1 {
		t.Fatalf("old stream after the relink: acks %v, ended %v, %d deliveries", a, ended, d.count("bob"))
	}
	if len(old.takeMarks()) != 0 || st.InboxDone("dc1", 1) {
		t.Fatal("the old stream marked the new link's seq 1")
	}
	cur := newInStream(m, "dc1", 6, nil)
	deliverNow(ctx, cur, guaranteedEnv(1, 1, "bob"))
	if acks := mustMark(t, cur); len(acks) != 1 || acks[0].GetCode() != 0 || !st.InboxDone("dc1", 1) || d.count("bob") != 2 {
		t.Fatalf("new stream: acks %v, %d deliveries", acks, d.count("bob"))
	}
}
