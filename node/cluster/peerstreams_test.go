package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// batchCounter counts RelayBatch messages a server receives.
type batchCounter struct{ batches atomic.Int64 }

type countingStream struct {
	grpc.ServerStream
	c *batchCounter
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if _, ok := m.(*concordv1.RelayBatch); ok && err == nil {
		s.c.batches.Add(1)
	}
	return err
}

func (c *batchCounter) option() grpc.ServerOption {
	return grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, countingStream{ss, c})
	})
}

// relayPair is node A's PeerStreams sending to node B's Server.
type relayPair struct {
	relay *PeerStreams
	srvB  *runningServer
	recB  *recorder
	res   *staticResolver
}

func newRelayPair(t *testing.T, tweak func(a, b *Config), opts ...grpc.ServerOption) *relayPair {
	t.Helper()
	cfgA, cfgB := testConfig(t, "a"), testConfig(t, "b")
	cfgB.ServerOptions = opts
	if tweak != nil {
		tweak(&cfgA, &cfgB)
	}
	p := &relayPair{recB: newRecorder()}
	p.srvB = startServer(t, cfgB, ServerDeps{Store: &fakeStore{id: "b"}, Deliverer: p.recB}, nil)
	p.res = newResolver("b", p.srvB.addr)
	p.relay = newTestPeerStreams(t, cfgA, p.res, p.res)
	return p
}

func TestPeerStreams_DeliversAndAcks(t *testing.T) {
	p := newRelayPair(t, nil)
	ctx := testCtx(t)
	if err := p.relay.Send(ctx, "b", envelope("x", mapMsg("m1"))); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got := p.recB.messages("x"); len(got) != 1 || got[0] != mapMsg("m1") {
		t.Fatalf("delivered %q, want the message byte for byte", got)
	}
}

func TestPeerStreams_AckFailures(t *testing.T) {
	p := newRelayPair(t, nil)
	p.recB.fail["gone"] = fmt.Errorf("deliver: %w", router.ErrNotConnected)
	p.recB.fail["slow"] = fmt.Errorf("deliver: %w", rpc.ErrSlowConsumer)
	p.recB.fail["closed"] = rpc.ErrClosed
	p.recB.fail["odd"] = errTest
	ctx := testCtx(t)
	tests := []struct {
		agent string
		want  error
		code  concordv1.RelayFailureCode
	}{
		{"ok", nil, 0},
		{"gone", router.ErrNotConnected, concordv1.RelayFailureCode_RELAY_FAILURE_CODE_NOT_CONNECTED},
		{"slow", rpc.ErrSlowConsumer, concordv1.RelayFailureCode_RELAY_FAILURE_CODE_SLOW_CONSUMER},
		{"closed", router.ErrNotConnected, concordv1.RelayFailureCode_RELAY_FAILURE_CODE_NOT_CONNECTED},
		{"odd", ErrRemoteDelivery, concordv1.RelayFailureCode_RELAY_FAILURE_CODE_INTERNAL},
	}
	for _, tc := range tests {
		t.Run(tc.agent, func(t *testing.T) {
			err := p.relay.Send(ctx, "b", envelope(tc.agent, mapMsg("m")))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Send: %v", err)
				}
				return
			}
			var de *DeliveryError
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrRemoteDelivery) || !errors.As(err, &de) || de.Code != tc.code {
				t.Fatalf("Send = %v, want %v with code %s", err, tc.want, tc.code)
			}
		})
	}
	// Empty envelopes are refused by the receiver, not by the sender.
	if err := p.relay.Send(ctx, "b", &router.Envelope{}); err != nil && !errors.Is(err, ErrRemoteDelivery) {
		t.Fatalf("empty envelope: %v", err)
	}
}

// TestPeerStreams_OrderAndBatchingUnderLoad pipelines many messages from
// concurrent senders: each recipient must get its messages in send order,
// and the stream must carry many envelopes per batch. The delivery
// timeout is generous: with the tests' usual second, 16,000 envelopes
// under -race on a loaded machine had the oldest in flight pass its
// deadline, the send watchdog broke the stream and thousands failed with
// ErrDeliveryTimeout (as designed: at most once); what is tested here is
// order and batching, not timeouts.
func TestPeerStreams_OrderAndBatchingUnderLoad(t *testing.T) {
	var bc batchCounter
	p := newRelayPair(t, func(a, _ *Config) { a.RelayDeliveryTimeout = waitTimeout }, bc.option())
	const senders, perSender = 8, 2000
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var (
		errOnce  sync.Once
		firstErr error
	)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var done sync.WaitGroup
			for i := range perSender {
				done.Add(1)
				p.relay.Submit(ctx, "b", envelope(fmt.Sprintf("agent-%d", g), fmtMsg(g, i)), func(err error) {
					if err != nil {
						failed.Add(1)
						errOnce.Do(func() { firstErr = err })
					}
					done.Done()
				})
			}
			done.Wait()
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d sends failed, the first with: %v", n, firstErr)
	}
	for g := range senders {
		got := p.recB.messages(fmt.Sprintf("agent-%d", g))
		if len(got) != perSender {
			t.Fatalf("agent-%d got %d messages, want %d", g, len(got), perSender)
		}
		for i, m := range got {
			if m != fmtMsg(g, i) {
				t.Fatalf("agent-%d message %d = %s, want %s (order broken)", g, i, m, fmtMsg(g, i))
			}
		}
	}
	total, batches := senders*perSender, bc.batches.Load()
	t.Logf("%d envelopes in %d batches (%.1f per batch)", total, batches, float64(total)/float64(batches))
	if batches == 0 || float64(total)/float64(batches) < 4 {
		t.Fatalf("%d envelopes took %d batches: not batching", total, batches)
	}
}

func TestPeerStreams_PeerNotAlive(t *testing.T) {
	p := newRelayPair(t, nil)
	start := time.Now()
	err := p.relay.Send(testCtx(t), "nobody", envelope("x", mapMsg("m")))
	if !errors.Is(err, ErrPeerUnavailable) {
		t.Fatalf("Send to an unknown node = %v, want ErrPeerUnavailable", err)
	}
	mustBeWithin(t, start, 500*time.Millisecond, "refusing an unknown node") // not a dial, nor the 1 s delivery timeout
	var got error
	p.relay.Submit(testCtx(t), "nobody", envelope("x", mapMsg("m")), func(err error) { got = err })
	if !errors.Is(got, ErrPeerUnavailable) {
		t.Fatalf("Submit reported %v before returning, want ErrPeerUnavailable", got)
	}
}

// TestPeerStreams_PeerDownFailsWithinDeadline: the node is alive in gossip but
// nothing listens at its address.
func TestPeerStreams_PeerDownFailsWithinDeadline(t *testing.T) {
	lis := listen(t, "")
	addr := lis.Addr().String()
	lis.Close()
	cfg := testConfig(t, "a")
	cfg.RelayDeliveryTimeout = scaled(500 * time.Millisecond)
	res := newResolver("down", addr)
	r := newTestPeerStreams(t, cfg, res, res)
	start := time.Now()
	err := r.Send(context.Background(), "down", envelope("x", mapMsg("m")))
	if !errors.Is(err, ErrPeerUnavailable) {
		t.Fatalf("Send = %v, want ErrPeerUnavailable", err)
	}
	mustBeWithin(t, start, cfg.RelayDeliveryTimeout+2*time.Second, "failing a message to a down peer") // slack for a loaded machine
}

// TestPeerStreams_StalledPeerTimesOut: the peer accepts the stream but never
// acks; the message fails by its deadline and the stream is torn down.
func TestPeerStreams_StalledPeerTimesOut(t *testing.T) {
	p := newRelayPair(t, func(a, _ *Config) { a.RelayDeliveryTimeout = scaled(300 * time.Millisecond) })
	block := make(chan struct{})
	p.recB.mu.Lock()
	p.recB.block = block
	p.recB.mu.Unlock()
	start := time.Now()
	err := p.relay.Send(context.Background(), "b", envelope("x", mapMsg("m")))
	close(block)
	if !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("Send = %v, want ErrDeliveryTimeout", err)
	}
	mustBeWithin(t, start, 300*time.Millisecond+2*time.Second, "timing out a stalled peer") // slack for a loaded machine
	p.recB.mu.Lock()
	p.recB.block = nil
	p.recB.mu.Unlock()
	eventually(t, 5*time.Second, func() error { // a fresh stream works again
		return p.relay.Send(testCtx(t), "b", envelope("x", mapMsg("m")))
	})
}

func TestPeerStreams_ContextDeadlineBoundsTheWait(t *testing.T) {
	p := newRelayPair(t, nil)
	block := make(chan struct{})
	defer close(block)
	p.recB.mu.Lock()
	p.recB.block = block
	p.recB.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.relay.Send(ctx, "b", envelope("x", mapMsg("m")))
	// Either the relay's sweep (the item's deadline is ctx's) or ctx.Done
	// in Send ends the wait first; both report ErrDeliveryTimeout.
	if !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("Send = %v, want ErrDeliveryTimeout", err)
	}
	mustBeWithin(t, start, 700*time.Millisecond, "a Send with a 100 ms deadline") // not the 1 s delivery timeout
}

// TestPeerStreams_ReconnectAfterPeerRestart: B stops (sends fail), then comes
// back on the same address and the relay uses it again.
func TestPeerStreams_ReconnectAfterPeerRestart(t *testing.T) {
	p := newRelayPair(t, func(a, _ *Config) { a.RelayDeliveryTimeout = scaled(500 * time.Millisecond) })
	ctx := testCtx(t)
	if err := p.relay.Send(ctx, "b", envelope("x", mapMsg("n1"))); err != nil {
		t.Fatalf("first Send: %v", err)
	}
	p.srvB.stop(t)
	err := p.relay.Send(context.Background(), "b", envelope("x", mapMsg("n2")))
	if err == nil {
		t.Fatal("Send to a stopped peer succeeded")
	}
	if !errors.Is(err, ErrPeerUnavailable) && !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("Send to a stopped peer = %v", err)
	}
	rec2 := newRecorder()
	startServer(t, testConfig(t, "b"), ServerDeps{Store: &fakeStore{id: "b"}, Deliverer: rec2}, listen(t, p.srvB.addr))
	eventually(t, 5*time.Second, func() error {
		return p.relay.Send(ctx, "b", envelope("x", mapMsg("n3")))
	})
	if got := rec2.messages("x"); len(got) == 0 || got[len(got)-1] != mapMsg("n3") {
		t.Fatalf("restarted peer got %q", got)
	}
}

func TestPeerStreams_EventsReachPeers(t *testing.T) {
	events := make(chan registry.Event, 4)
	srv := startServer(t, testConfig(t, "b"), ServerDeps{Store: &fakeStore{id: "b"}, Events: sinkFunc(func(ev registry.Event) { events <- ev })}, nil)
	res := newResolver("b", srv.addr)
	r := newTestPeerStreams(t, testConfig(t, "a"), res, res)
	local := &localSink{}
	subs := &subscriberSet{}
	b := NewEventBroadcaster(local, r, subs)
	if b.HasSubscribers() {
		t.Fatal("HasSubscribers = true with an alive peer that holds no subscription")
	}
	// Not relayed to a peer without subscriptions: the peer's first event
	// is the one published after it subscribed (one stream keeps order).
	b.PublishEphemeral(registry.Event{ID: "01I", Type: router.EventMessageSent})
	subs.on.Store(true)
	if !b.HasSubscribers() {
		t.Fatal("HasSubscribers = false with an alive peer that holds subscriptions")
	}
	ev := registry.Event{ID: "01J", Type: router.EventMessageSent, Timestamp: 42, Source: "p1",
		Data: []byte(`{"messageId":"m"}`), AgentIDs: []string{"a1", "a2"}, ScopeIDs: []string{"s1"}}
	b.PublishEphemeral(ev)
	select {
	case got := <-events:
		if got.ID != ev.ID || got.Type != ev.Type || got.Timestamp != 42 || string(got.Data) != string(ev.Data) ||
			fmt.Sprint(got.AgentIDs, got.ScopeIDs) != fmt.Sprint(ev.AgentIDs, ev.ScopeIDs) || got.Source != "p1" {
			t.Fatalf("peer got %+v, want %+v", got, ev)
		}
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("event not relayed")
	}
	if local.n.Load() != 2 {
		t.Fatalf("local sink got %d events, want 2", local.n.Load())
	}
	res.set("b", "")
	if b.HasSubscribers() {
		t.Fatal("HasSubscribers = true with no peer and no local subscriber")
	}
}

func TestPeerStreams_CloseFailsPending(t *testing.T) {
	p := newRelayPair(t, nil)
	block := make(chan struct{})
	defer close(block)
	p.recB.mu.Lock()
	p.recB.block = block
	p.recB.mu.Unlock()
	errs := make(chan error, 1)
	go func() { errs <- p.relay.Send(context.Background(), "b", envelope("x", mapMsg("m"))) }()
	eventually(t, 5*time.Second, func() error {
		p.relay.mu.RLock()
		defer p.relay.mu.RUnlock()
		if ps := p.relay.senders["b"]; ps == nil || ps.inflightLen() == 0 {
			return errors.New("not in flight yet")
		}
		return nil
	})
	if err := p.relay.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, ErrClosed) && !errors.Is(err, ErrDeliveryTimeout) {
		t.Fatalf("Send in flight at Close = %v", err)
	}
	if err := p.relay.Send(testCtx(t), "b", envelope("x", mapMsg("m"))); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

func TestPeerStreams_IdleSenderExits(t *testing.T) {
	p := newRelayPair(t, func(a, _ *Config) { a.RelayIdleTimeout = 50 * time.Millisecond })
	if err := p.relay.Send(testCtx(t), "b", envelope("x", mapMsg("m"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		p.relay.mu.RLock()
		defer p.relay.mu.RUnlock()
		if len(p.relay.senders) != 0 {
			return errors.New("sender still running")
		}
		return nil
	})
	if err := p.relay.Send(testCtx(t), "b", envelope("x", mapMsg("m"))); err != nil {
		t.Fatalf("Send after idle exit: %v", err)
	}
}

type sinkFunc func(registry.Event)

func (f sinkFunc) PublishEphemeral(ev registry.Event) { f(ev) }

type localSink struct{ n atomic.Int64 }

func (s *localSink) PublishEphemeral(registry.Event) { s.n.Add(1) }
func (s *localSink) HasSubscribers() bool            { return false }

// fakeStore is a RaftStore whose ApplyForwardedFrom answers with err (or index 7).
type fakeStore struct {
	id      string
	err     error
	leader  string
	servers []raftstore.Server
	removed []string
	calls   atomic.Int64
	block   chan struct{} // when non-nil, ApplyForwardedFrom waits for it or ctx
	mu      sync.Mutex
}

func (f *fakeStore) ID() string { return f.id }
func (f *fakeStore) ApplyForwardedFrom(ctx context.Context, _ string, _ []byte) (raftstore.ForwardReply, error) {
	f.calls.Add(1)
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return raftstore.ForwardReply{}, ctx.Err()
		}
	}
	if f.err != nil {
		var ce *raftstore.CommandError
		if errors.As(f.err, &ce) {
			return raftstore.ForwardReply{Index: ce.Index}, nil // committed: the outcome is the reply's
		}
		return raftstore.ForwardReply{}, f.err
	}
	return raftstore.ForwardReply{Index: 7}, nil
}
func (f *fakeStore) Leader() (string, string) { return f.leader, f.leader + ":raft" }
func (f *fakeStore) State() raftstore.State   { return raftstore.StateFollower }
func (f *fakeStore) AppliedIndex() uint64     { return 3 }
func (f *fakeStore) Stats() map[string]string { return map[string]string{"k": "v"} }
func (f *fakeStore) Configuration(context.Context) ([]raftstore.Server, error) {
	return f.servers, nil
}
func (f *fakeStore) RemoveServer(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.removed = append(f.removed, id)
	return nil
}

// TestPeerStreams_BlockedPeerCannotHangSenders: the peer stops reading, so the
// stream's flow-control window fills and Send blocks; every message must
// still fail by its deadline (the callers here have none of their own).
func TestPeerStreams_BlockedPeerCannotHangSenders(t *testing.T) {
	p := newRelayPair(t, func(a, _ *Config) { a.RelayDeliveryTimeout = scaled(300 * time.Millisecond) })
	block := make(chan struct{})
	defer close(block)
	p.recB.mu.Lock()
	p.recB.block = block
	p.recB.mu.Unlock()
	big := []byte(`{"id":"m","from":"a","to":{"agent":"x"},"payload":"` + strings.Repeat("x", 16<<10) + `"}`)
	const n = 2000 // 32 MB: far beyond any HTTP/2 window
	var wg sync.WaitGroup
	var timedOut atomic.Int64
	start := time.Now()
	for range n {
		wg.Add(1)
		p.relay.Submit(context.Background(), "b", &router.Envelope{Message: big, RecipientAgentID: "x"}, func(err error) {
			if errors.Is(err, ErrDeliveryTimeout) || errors.Is(err, ErrPeerUnavailable) {
				timedOut.Add(1)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if timedOut.Load() != n {
		t.Fatalf("%d of %d messages timed out, want all", timedOut.Load(), n)
	}
	mustBeWithin(t, start, 10*time.Second, "failing messages to a blocked peer") // 32 MB under -race on a loaded machine; a hang is forever
}

// subscriberSet says peer "b" holds subscriptions once on is set.
type subscriberSet struct{ on atomic.Bool }

func (s *subscriberSet) HasSubscriptionsOn(nodeID string) bool { return nodeID == "b" && s.on.Load() }
