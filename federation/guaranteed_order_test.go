package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// heldDeliverer hands each delivery to the test (calls), which answers it
// when it chooses; delivered lists the message ids taken, in order.
type heldDeliverer struct {
	calls     chan heldCall
	mu        sync.Mutex
	delivered []string
}

type heldCall struct {
	id   string
	done func(error)
}

func (d *heldDeliverer) DeliverAgent(_ context.Context, _ string, msg json.RawMessage, done func(error)) {
	var m struct{ ID string }
	_ = json.Unmarshal(msg, &m)
	d.calls <- heldCall{id: m.ID, done: func(err error) {
		if err == nil {
			d.mu.Lock()
			d.delivered = append(d.delivered, m.ID)
			d.mu.Unlock()
		}
		done(err)
	}}
}

func (d *heldDeliverer) taken() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.delivered)
}

// orderEnv is guaranteed message gseq (id "g<gseq>") on stream seq seq,
// sent while the sender's oldest unanswered seq was floor.
func orderEnv(seq, gseq, floor uint64) *concordv1.FedEnvelope {
	env := guaranteedEnv(seq, gseq, "bob")
	env.MessageId, env.GuaranteedFloor = fmt.Sprintf("g%d", gseq), floor
	return env
}

// waitAcks waits until in holds n acks and returns them.
func waitAcks(t *testing.T, in *inStream, n int) []*concordv1.FedAck {
	t.Helper()
	var got []*concordv1.FedAck
	for deadline := time.Now().Add(5 * time.Second); len(got) < n; {
		got = append(got, in.takeAcks()...)
		if time.Now().After(deadline) {
			t.Fatalf("acks %v, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
	return got
}

// TestInbound_GuaranteedResendNeverOvertakes: the receiving side delivers
// guaranteed messages strictly in seq order. Seq 1's delivery is still
// out when seq 2 arrives behind it on the stream; seq 1 then fails
// retryably (5000) and the sender resends what was refused. Before the
// receiver ordered by seq, seq 2 was handed to the agent while 1 was
// out, and the resent 1 arrived after it ([g2 g1]).
func TestInbound_GuaranteedResendNeverOvertakes(t *testing.T) {
	m, _, _ := testManager(t, "dc2", "dc1", nil)
	d := &heldDeliverer{calls: make(chan heldCall, 8)}
	m.deps.Deliver = d
	in := newInStream(m, "dc1", 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); in.sequencer(ctx) }()
	go func() { defer wg.Done(); in.marker(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	link, _ := m.deps.State.Link("dc1")

	failFirst := true // seq 1's first attempt fails retryably
	// send hands envs to the stream as its reader does, answers every
	// delivery (seq 1's first with 5000) and returns the stream's acks.
	send := func(envs ...*concordv1.FedEnvelope) map[uint64]*concordv1.FedAck {
		for _, env := range envs {
			in.deliver(ctx, env, link, true)
		}
		acks := map[uint64]*concordv1.FedAck{}
		for deadline := time.Now().Add(5 * time.Second); len(acks) < len(envs); {
			select {
			case c := <-d.calls:
				if c.id == "g1" && failFirst {
					failFirst = false
					c.done(&CodeError{Code: CodeUnavailable, Message: "not now"})
					continue
				}
				c.done(nil)
			case <-time.After(time.Millisecond):
			}
			for _, a := range in.takeAcks() {
				acks[a.GetSeq()] = a
			}
			if time.Now().After(deadline) {
				t.Fatalf("acks %v for %d messages", acks, len(envs))
			}
		}
		return acks
	}

	// One batch carries 1 then 2.
	envs := []*concordv1.FedEnvelope{orderEnv(1, 1, 1), orderEnv(2, 2, 1)}
	var next uint64 = 3
	for round := 0; len(envs) > 0; round++ {
		if round == 3 {
			t.Fatalf("still refused after %d rounds: %v", round, envs)
		}
		acks := send(envs...)
		var again []*concordv1.FedEnvelope // the sender resends the 5000s in seq order
		for _, env := range envs {
			if acks[env.GetSeq()].GetCode() == CodeUnavailable {
				again = append(again, orderEnv(next, env.GetGuaranteedSeq(), 1))
				next++
			}
		}
		envs = again
	}
	if got := d.taken(); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Fatalf("agent received %v, want [g1 g2]", got)
	}
}

// TestInbound_GuaranteedOrderCheck: which earlier seqs let a guaranteed
// message through. It is delivered only when every seq from the sender's
// floor up to it is recorded in the inbox (whichever node recorded it) or
// final on this node; otherwise it answers 5000 and is not delivered.
func TestInbound_GuaranteedOrderCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setup     func(m *Manager)
		gseq      uint64
		floor     uint64
		delivered bool
	}{
		{name: "first seq at the floor", gseq: 1, floor: 1, delivered: true},
		{name: "earlier seq never arrived", gseq: 2, floor: 1},
		{name: "earlier seqs below the sender's floor", gseq: 5, floor: 5, delivered: true},
		{name: "earlier seq recorded through another node", gseq: 3, floor: 1, delivered: true, setup: func(m *Manager) {
			mark(m, 1, 2)
		}},
		{name: "one earlier seq of two recorded", gseq: 3, floor: 1, setup: func(m *Manager) { mark(m, 2) }},
		{name: "earlier seq final here, its mark not committed", gseq: 2, floor: 1, delivered: true, setup: func(m *Manager) {
			m.gactive[gkey{"dc1", 0, 1}] = gentry{at: m.now(), final: true}
		}},
		{name: "earlier seq being delivered on another stream", gseq: 2, floor: 1, setup: func(m *Manager) {
			m.gactive[gkey{"dc1", 0, 1}] = gentry{at: m.now()}
		}},
		{name: "far ahead of its floor", gseq: 1 + gapLimit + 1, floor: 1, setup: func(m *Manager) {
			for q := uint64(1); q <= gapLimit; q++ {
				m.gactive[gkey{"dc1", 0, q}] = gentry{at: m.now(), final: true}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, d, _ := testManager(t, "dc2", "dc1", nil)
			if tc.setup != nil {
				m.gmu.Lock()
				tc.setup(m)
				m.gmu.Unlock()
			}
			in := newInStream(m, "dc1", 0, nil)
			deliverNow(context.Background(), in, orderEnv(1, tc.gseq, tc.floor))
			acks := in.takeAcks()
			if got := d.count("bob") == 1; got != tc.delivered {
				t.Fatalf("delivered %v, want %v (acks %v)", got, tc.delivered, acks)
			}
			if !tc.delivered && (len(acks) != 1 || acks[0].GetCode() != CodeUnavailable) {
				t.Fatalf("acks %v, want one 5000", acks)
			}
		})
	}
}

// mark records seqs from dc1 in m's inbox, as another node would.
func mark(m *Manager, seqs ...uint64) {
	if _, err := m.deps.State.Apply(1, &concordv1.FedInboxMark{SourceSystemId: "dc1", Seqs: seqs}); err != nil {
		panic(err)
	}
}

// flakyStore fails inbox marks (not holds) while failing is set.
type flakyStore struct {
	fsmStore
	mu      sync.Mutex
	failing bool
}

func (f *flakyStore) setFailing(v bool) { f.mu.Lock(); f.failing = v; f.mu.Unlock() }

func (f *flakyStore) Apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	f.mu.Lock()
	mark, _ := msg.(*concordv1.FedInboxMark)
	failing := t == concordv1.CommandType_COMMAND_TYPE_FED_INBOX_MARK && len(mark.GetSeqs()) > 0 && f.failing
	f.mu.Unlock()
	if failing {
		return nil, 0, errors.New("no quorum")
	}
	return f.fsmStore.Apply(ctx, t, msg)
}

// TestInbound_GuaranteedMarkRetried: a delivered message whose inbox
// mark fails is not answered 5000 (that made the sender resend, and the
// message was delivered twice): the mark is tried again until it
// commits, a resend meanwhile is refused without delivery, and the ack
// then says delivered.
func TestInbound_GuaranteedMarkRetried(t *testing.T) {
	m, d, _ := testManager(t, "dc2", "dc1", nil)
	m.cfg.BackoffMin = time.Millisecond
	store := &flakyStore{fsmStore: fsmStore{m.deps.State}, failing: true}
	m.deps.Store = store
	in := newInStream(m, "dc1", 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); in.marker(ctx) }()
	defer func() { cancel(); <-done }()

	deliverNow(ctx, in, orderEnv(1, 1, 1))
	deliverNow(ctx, in, orderEnv(2, 1, 1)) // resent while its mark fails
	if a := waitAcks(t, in, 1); len(a) != 1 || a[0].GetSeq() != 2 || a[0].GetCode() != CodeUnavailable {
		t.Fatalf("acks while the mark fails: %v, want one 5000 for the resend", a)
	}
	store.setFailing(false)
	if a := waitAcks(t, in, 1); len(a) != 1 || a[0].GetSeq() != 1 || a[0].GetCode() != 0 || !slices.Equal(a[0].GetDelivered(), []string{"dc2:agent:bob"}) {
		t.Fatalf("acks once the mark committed: %v", a)
	}
	if d.count("bob") != 1 || !m.deps.State.InboxDone("dc1", 1) {
		t.Fatalf("%d deliveries, recorded %v", d.count("bob"), m.deps.State.InboxDone("dc1", 1))
	}
}
