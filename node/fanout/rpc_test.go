package fanout

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// liveSessions is LocalSessions over real in-process rpc connections: a
// client attaches a session by calling "attach" {"session": id}.
type liveSessions struct {
	mu sync.Mutex
	m  map[string]*rpc.Conn
}

func (s *liveSessions) Conn(id string) (*rpc.Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	return c, ok
}

func (s *liveSessions) Handle(_ context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	var p struct{ Session string }
	if req.Method != "attach" || json.Unmarshal(req.Params, &p) != nil {
		return nil, rpc.NewError(rpc.CodeMethodNotFound, "")
	}
	s.mu.Lock()
	s.m[p.Session] = c
	s.mu.Unlock()
	return map[string]bool{"ok": true}, nil
}

func (s *liveSessions) Closed(*rpc.Conn) {}

type eventInbox struct{ ch chan json.RawMessage }

func (b *eventInbox) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if req.Method == MethodEvent {
		b.ch <- append(json.RawMessage(nil), req.Params...)
	}
	return nil, nil
}

func (b *eventInbox) Closed(*rpc.Conn) {}

func TestHub_RealConnection(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	sessions := &liveSessions{m: map[string]*rpc.Conn{}}
	srv, err := rpc.NewServer(rpc.DefaultConfig(), sessions)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	defer func() { _ = srv.Shutdown(ctx) }()
	box := &eventInbox{ch: make(chan json.RawMessage, 64)}
	cli, err := srv.ServeConn(ctx, box)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Call(ctx, "attach", map[string]string{"session": "s1"}); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(reg, &fakeProposer{reg: reg})
	cfg.Sessions = sessions
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(rctx) }()
	defer func() { stop(); <-done }()

	res, err := h.Subscribe(ctx, "s1", json.RawMessage(`{"filter":{"eventTypes":["agent.registered"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	id := res.(SubscribeResult).SubscriptionID
	var want []registry.Event
	for range 3 {
		want = append(want, reg.appendEvent("agent_registered", "a"))
	}
	for i := range want {
		select {
		case raw := <-box.ch:
			var e eventNote
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			if e.SubscriptionID != id || e.SequenceNumber != uint64(i+1) || e.EventID != want[i].ID || e.Event.Type != "agent_registered" {
				t.Errorf("event %d: %s", i, raw)
			}
		case <-time.After(testTimeout):
			t.Fatal("map/event not received")
		}
	}
}
