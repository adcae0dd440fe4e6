package federation

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// wire records the batches written on a Link client stream; ack, when
// set, is called with each batch after it was recorded (a peer that
// answers at once).
type wire struct {
	concordv1.Federation_LinkClient
	mu      sync.Mutex
	batches [][]*concordv1.FedEnvelope
	ack     func([]*concordv1.FedEnvelope)
}

func (w *wire) Send(f *concordv1.FedFrame) error {
	envs := f.GetBatch().GetEnvelopes()
	w.mu.Lock()
	w.batches = append(w.batches, envs)
	w.mu.Unlock()
	if w.ack != nil {
		w.ack(envs)
	}
	return nil
}

func (w *wire) seqs() [][]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([][]uint64, len(w.batches))
	for i, b := range w.batches {
		for _, e := range b {
			out[i] = append(out[i], e.GetSeq())
		}
	}
	return out
}

func upLink(t *testing.T, w *wire) *outLink {
	t.Helper()
	m := &Manager{now: time.Now, log: discardLogger(), deps: Deps{IsLeader: func() bool { return false }}}
	l := newOutLink(m, &concordv1.FedLink{PeerSystemId: "dc2", PeerAddrs: []string{"x"}})
	l.up = true
	l.attach(w, func() {})
	return l
}

func ackAll(l *outLink, envs []*concordv1.FedEnvelope) {
	acks := make([]*concordv1.FedAck, len(envs))
	for i, e := range envs {
		acks[i] = &concordv1.FedAck{Seq: e.GetSeq()}
	}
	l.acked(acks)
}

// TestOutLink_InlineSendWhenIdle: a message that finds the link idle is
// written by its sender at once; one that finds a message queued or
// awaiting its ack, one too large, or no stream attached, waits for the
// send loop (which is woken), and the loop keeps the order.
func TestOutLink_InlineSendWhenIdle(t *testing.T) {
	w := &wire{}
	l := upLink(t, w)
	send := func(id string, size int) {
		l.enqueue(&concordv1.FedEnvelope{MessageId: id, Payload: make([]byte, size)}, func(Outcome) {})
	}
	steps := []struct {
		name  string
		do    func()
		wire  string // the batches written so far, by seq
		woken bool
	}{
		{"idle: inline", func() { send("a", 10) }, "[[1]]", false},
		{"a awaits its ack: queued", func() { send("b", 10) }, "[[1]]", true},
		{"b queued before it: queued", func() { ackAll(l, w.batches[0]); send("c", 10) }, "[[1]]", true},
		{"the loop flushes in order", func() { flushNow(t, l, w) }, "[[1] [2 3]]", false},
		{"too large: queued", func() { ackAll(l, w.batches[1]); send("d", inlineMaxBytes+1) }, "[[1] [2 3]]", true},
		{"flushed", func() { flushNow(t, l, w) }, "[[1] [2 3] [4]]", false},
		{"no stream attached: queued", func() { ackAll(l, w.batches[2]); l.detach(); send("e", 10) }, "[[1] [2 3] [4]]", true},
	}
	for _, s := range steps {
		s.do()
		woken := false
		select {
		case <-l.wake:
			woken = true
		default:
		}
		if got := fmtSeqs(w.seqs()); got != s.wire || woken != s.woken {
			t.Fatalf("%s: wire %s woken %v, want %s woken %v", s.name, got, woken, s.wire, s.woken)
		}
	}
}

func flushNow(t *testing.T, l *outLink, w *wire) {
	t.Helper()
	if err := l.flush(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

func fmtSeqs(b [][]uint64) string {
	s := "["
	for i, x := range b {
		if i > 0 {
			s += " "
		}
		s += "["
		for j, q := range x {
			if j > 0 {
				s += " "
			}
			s += strconv.FormatUint(q, 10)
		}
		s += "]"
	}
	return s + "]"
}

// TestOutLink_InlineAndLoopKeepOrder: senders racing with the send loop
// (a peer that acks at once, so inline sends happen often) put every
// envelope on the wire once, in seq order, and each sender's messages in
// the order it sent them.
func TestOutLink_InlineAndLoopKeepOrder(t *testing.T) {
	w := &wire{}
	l := upLink(t, w)
	w.ack = func(envs []*concordv1.FedEnvelope) { ackAll(l, envs) }
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { // the send loop's part: flush when woken
		defer close(loopDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
				if err := l.flush(ctx, w); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	const senders, each = 8, 300
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				l.enqueue(&concordv1.FedEnvelope{From: strconv.Itoa(s), MessageId: strconv.Itoa(i)}, func(Outcome) {})
			}
		})
	}
	wg.Wait()
	cancel()
	<-loopDone
	flushNow(t, l, w) // what the loop had not flushed yet
	w.mu.Lock()
	defer w.mu.Unlock()
	next := uint64(1)
	last := map[string]int{}
	for _, b := range w.batches {
		for _, e := range b {
			if e.GetSeq() != next {
				t.Fatalf("seq %d on the wire, want %d", e.GetSeq(), next)
			}
			next++
			i, _ := strconv.Atoi(e.GetMessageId())
			if p, ok := last[e.GetFrom()]; ok && i != p+1 {
				t.Fatalf("sender %s: message %d after %d", e.GetFrom(), i, p)
			}
			last[e.GetFrom()] = i
		}
	}
	if got := next - 1; got != senders*each {
		t.Fatalf("%d envelopes on the wire, want %d", got, senders*each)
	}
}

// failingWire is a stream whose writes fail (it broke).
type failingWire struct {
	concordv1.Federation_LinkClient
}

func (failingWire) Send(*concordv1.FedFrame) error { return errors.New("stream broken") }

// TestOutLink_InlineSendFailureEndsSession: a failed inline write ends
// the stream's session; the message stays in flight, so the session's
// end answers it 5000 like every other message lost with the stream.
func TestOutLink_InlineSendFailureEndsSession(t *testing.T) {
	m := &Manager{now: time.Now, log: discardLogger(), deps: Deps{IsLeader: func() bool { return false }}}
	l := newOutLink(m, &concordv1.FedLink{PeerSystemId: "dc2", PeerAddrs: []string{"x"}})
	l.up = true
	ended := false
	l.attach(failingWire{}, func() { ended = true })
	var got []Outcome
	l.enqueue(&concordv1.FedEnvelope{MessageId: "a"}, func(o Outcome) { got = append(got, o) })
	if !ended || len(l.inflight) != 1 || len(got) != 0 {
		t.Fatalf("ended %v, %d in flight, outcomes %+v", ended, len(l.inflight), got)
	}
	l.detach()
	l.disconnected("x")
	if len(got) != 1 || got[0].Err == nil || got[0].Err.Code != CodeUnavailable {
		t.Fatalf("outcome after the session ended: %+v", got)
	}
}
