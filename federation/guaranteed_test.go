package federation

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fsmStore applies proposals straight to a State, encoded and decoded as
// the FSM would.
type fsmStore struct{ st *State }

func (f fsmStore) Apply(_ context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	b, err := proto.Marshal(msg)
	if err != nil {
		return nil, 0, err
	}
	body := f.st.Commands()[t]()
	if err := proto.Unmarshal(b, body); err != nil {
		return nil, 0, err
	}
	res, err := f.st.Apply(1, body)
	return res, 1, err
}

// oneAgent is a local directory with the agent "bob", exported to all.
type oneAgent struct{}

func (oneAgent) Agents() []*concordv1.FedRemoteAgent { return []*concordv1.FedRemoteAgent{{Id: "bob"}} }
func (oneAgent) Agent(id string) (*concordv1.FedRemoteAgent, bool) {
	return &concordv1.FedRemoteAgent{Id: id}, id == "bob"
}
func (oneAgent) ScopeMembers(string) ([]string, bool) { return nil, false }
func (oneAgent) Version() uint64                      { return 1 }

// countingDeliverer counts deliveries per agent and takes them all.
type countingDeliverer struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *countingDeliverer) DeliverAgent(_ context.Context, id string, _ json.RawMessage, done func(error)) {
	d.mu.Lock()
	d.n[id]++
	d.mu.Unlock()
	done(nil)
}

func (d *countingDeliverer) count(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[id]
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testManager is a manager of system self linked to peer, on a fake
// clock, with its State applied synchronously.
func testManager(t *testing.T, self, peer string, outbox *concordv1.FedOutboxPolicy) (*Manager, *countingDeliverer, *clock) {
	t.Helper()
	st := NewState()
	l := link(peer)
	l.Outbox = outbox
	if err := apply(t, st, cmdPut, &concordv1.FedLinkPut{Link: l}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	cfg.SystemID, cfg.NodeID, cfg.Plaintext, cfg.Now = self, self+"-1", true, clk.now
	cfg.GuaranteedWait = 10 * time.Millisecond
	d := &countingDeliverer{n: map[string]int{}}
	m, err := New(cfg, Deps{State: st, Store: fsmStore{st}, IsLeader: func() bool { return true }, Local: oneAgent{},
		Deliver: d, Servers: func() []string { return []string{"127.0.0.1:1"} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stopGuaranteed)
	return m, d, clk
}

func guaranteedEnv(seq, gseq uint64, to string) *concordv1.FedEnvelope {
	env := &concordv1.FedEnvelope{Seq: seq, SourceSystem: "dc1", TargetSystem: "dc2", MaxHops: 5, MessageId: "m", From: "alice",
		ToAgent: to, Payload: []byte(`"x"`), GuaranteedSeq: gseq, GuaranteedFloor: 1}
	Stamp(env, "dc1")
	return env
}

func (in *inStream) takeAcks() []*concordv1.FedAck {
	in.mu.Lock()
	defer in.mu.Unlock()
	a := in.acks
	in.acks = nil
	return a
}

func (in *inStream) takeMarks() []gmark {
	in.mu.Lock()
	defer in.mu.Unlock()
	g := in.gmarks
	in.gmarks = nil
	return g
}

// TestInbound_GuaranteedDedupe: a guaranteed message is delivered once,
// acknowledged only after its seq is in the Raft inbox, answered 5000
// while its first delivery is unfinished and "duplicate" once recorded.
func TestInbound_GuaranteedDedupe(t *testing.T) {
	m, d, clk := testManager(t, "dc2", "dc1", nil)
	in := newInStream(m, "dc1", 0, nil)
	ctx := context.Background()

	deliverNow(ctx, in, guaranteedEnv(1, 1, "bob"))
	if d.count("bob") != 1 || len(in.takeAcks()) != 0 {
		t.Fatal("delivered message acknowledged before its mark")
	}
	deliverNow(ctx, in, guaranteedEnv(2, 1, "bob")) // sent again while unmarked
	if a := in.takeAcks(); len(a) != 1 || a[0].GetCode() != CodeUnavailable || d.count("bob") != 1 {
		t.Fatalf("resend during delivery: %v, %d deliveries", a, d.count("bob"))
	}
	acks := mustMark(t, in)
	if len(acks) != 1 || acks[0].GetSeq() != 1 || acks[0].GetCode() != 0 || !slices.Equal(acks[0].GetDelivered(), []string{"dc2:agent:bob"}) {
		t.Fatalf("acks after the mark: %v", acks)
	}
	if !m.deps.State.InboxDone("dc1", 1) {
		t.Fatal("seq 1 not recorded")
	}
	deliverNow(ctx, in, guaranteedEnv(3, 1, "bob"))
	if a := in.takeAcks(); len(a) != 1 || !a[0].GetDuplicate() || d.count("bob") != 1 {
		t.Fatalf("resend after the mark: %v, %d deliveries", a, d.count("bob"))
	}

	// A refusal for good is recorded too: the retry is a duplicate.
	deliverNow(ctx, in, guaranteedEnv(4, 2, "nobody"))
	acks = mustMark(t, in)
	if len(acks) != 1 || acks[0].GetCode() != CodeAgentNotFound || !m.deps.State.InboxDone("dc1", 2) {
		t.Fatalf("unknown agent: %v", acks)
	}

	// A delivery whose end was lost blocks its seq only for AckTimeout.
	m.gmu.Lock()
	m.gactive[gkey{"dc1", 0, 3}] = gentry{at: clk.now()}
	m.gmu.Unlock()
	deliverNow(ctx, in, guaranteedEnv(5, 3, "bob"))
	if a := in.takeAcks(); len(a) != 1 || a[0].GetCode() != CodeUnavailable {
		t.Fatalf("seq in delivery: %v", a)
	}
	clk.add(m.cfg.AckTimeout + time.Second)
	deliverNow(ctx, in, guaranteedEnv(6, 3, "bob"))
	if d.count("bob") != 2 {
		t.Fatal("a stale delivery entry kept blocking its seq")
	}
	mustMark(t, in)

	// Once the stream ended, a finished delivery is still recorded.
	in.closeMarks()
	deliverNow(ctx, in, guaranteedEnv(7, 4, "bob"))
	deadline := time.Now().Add(5 * time.Second)
	for !m.deps.State.InboxDone("dc1", 4) {
		if time.Now().After(deadline) {
			t.Fatal("delivery after the stream closed was not recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Guaranteed messages cross one link only.
	fwd := guaranteedEnv(8, 5, "bob")
	fwd.TargetSystem = "dc3"
	deliverNow(ctx, in, fwd)
	if a := in.takeAcks(); len(a) != 1 || a[0].GetCode() != CodeInvalidParams {
		t.Fatalf("guaranteed message in transit: %v", a)
	}
}

// mustMark records the stream's pending marks and returns their acks.
func mustMark(t *testing.T, in *inStream) []*concordv1.FedAck {
	t.Helper()
	acks, err := in.markAndAck(context.Background(), in.takeMarks())
	if err != nil {
		t.Fatal(err)
	}
	return acks
}

// TestOutLink_GuaranteedDrain: a guaranteed send is stored before it is
// answered, sent by the (leader's) stream with its outbox seq and floor,
// not sent twice while in flight, sent again after a retryable refusal
// once the pause is over, and removed once answered; a full outbox
// refuses with 5000.
func TestOutLink_GuaranteedDrain(t *testing.T) {
	m, _, clk := testManager(t, "dc1", "dc2", &concordv1.FedOutboxPolicy{MaxMessages: 2})
	l, _ := m.deps.State.Link("dc2")
	ol := newOutLink(m, l)
	send := func(id string) Outcome {
		ch := make(chan Outcome, 1)
		env := &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "dc2", MaxHops: 5, MessageId: id, From: "alice", ToAgent: "bob"}
		Stamp(env, "dc1")
		m.sendGuaranteed(env, ol, func(o Outcome) { ch <- o })
		return <-ch
	}
	if o := send("a"); !o.Queued {
		t.Fatalf("send with the stream down: %+v, want queued", o)
	}
	if o := send("b"); !o.Queued {
		t.Fatalf("second send: %+v", o)
	}
	if o := send("c"); o.Err == nil || o.Err.Code != CodeUnavailable || !strings.Contains(o.Err.Message, "full") {
		t.Fatalf("send past the bound: %+v", o)
	}

	var rec batchRecorder
	if err := ol.flush(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.batches) != 1 || len(rec.batches[0]) != 2 {
		t.Fatalf("batches %v", rec.batches)
	}
	a, b := rec.batches[0][0], rec.batches[0][1]
	if a.GetGuaranteedSeq() != 1 || b.GetGuaranteedSeq() != 2 || a.GetGuaranteedFloor() != 1 || a.GetMessageId() != "a" {
		t.Fatalf("sent %v / %v", a, b)
	}
	rec.batches = nil
	if err := ol.flush(context.Background(), &rec); err != nil || len(rec.batches) != 0 {
		t.Fatalf("in-flight messages sent again: %v %v", rec.batches, err)
	}

	ol.acked([]*concordv1.FedAck{{Seq: a.GetSeq(), Delivered: []string{"dc2:agent:bob"}}, {Seq: b.GetSeq(), Code: CodeUnavailable}})
	ol.commitAcks(context.Background())
	if n, _ := m.deps.State.OutboxSize("dc2"); n != 1 {
		t.Fatalf("outbox holds %d after one answer, want 1", n)
	}
	if err := ol.flush(context.Background(), &rec); err != nil || len(rec.batches) != 0 {
		t.Fatalf("refused message sent again at once: %v %v", rec.batches, err)
	}
	clk.add(time.Second + 5*m.cfg.BackoffMin)
	if err := ol.flush(context.Background(), &rec); err != nil || len(rec.batches) != 1 || rec.batches[0][0].GetGuaranteedSeq() != 2 ||
		rec.batches[0][0].GetGuaranteedFloor() != 2 {
		t.Fatalf("after the pause: %v %v", rec.batches, err)
	}
	ol.acked([]*concordv1.FedAck{{Seq: rec.batches[0][0].GetSeq(), Duplicate: true}})
	ol.commitAcks(context.Background())
	if n, _ := m.deps.State.OutboxSize("dc2"); n != 0 {
		t.Fatalf("outbox holds %d after every answer", n)
	}

	// A sender waiting on this node hears the peer's answer.
	ol.up = true
	done := make(chan Outcome, 1)
	env := &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "dc2", MaxHops: 5, MessageId: "w", From: "alice", ToAgent: "bob"}
	Stamp(env, "dc1")
	m.cfg.GuaranteedWait = 10 * time.Second
	m.sendGuaranteed(env, ol, func(o Outcome) { done <- o })
	var sent *concordv1.FedEnvelope
	for deadline := time.Now().Add(5 * time.Second); sent == nil; {
		rec.batches = nil
		if err := ol.flush(context.Background(), &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.batches) > 0 {
			sent = rec.batches[0][0]
		} else if time.Now().After(deadline) {
			t.Fatal("the waiting send was never drained")
		}
	}
	ol.acked([]*concordv1.FedAck{{Seq: sent.GetSeq(), Delivered: []string{"dc2:agent:bob"}}})
	ol.commitAcks(context.Background())
	if o := <-done; !slices.Equal(o.Delivered, []string{"dc2:agent:bob"}) {
		t.Fatalf("waiting sender heard %+v", o)
	}
}

// deliverNow hands env to in as the stream's reader does, with the link
// as the state holds it now; a guaranteed one goes straight to the
// sequencer's step (it returns once the outcome is known).
func deliverNow(ctx context.Context, in *inStream, env *concordv1.FedEnvelope) {
	link, ok := in.m.deps.State.Link(in.peer)
	if env.GetGuaranteedSeq() > 0 && CheckInbound(env, in.m.cfg.SystemID, in.peer, in.m.cfg.MaxEnvelopeBytes) == nil {
		in.deliverGuaranteed(ctx, env, link, ok)
		return
	}
	in.deliver(ctx, env, link, ok)
}
