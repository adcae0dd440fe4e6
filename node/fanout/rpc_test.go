package fanout

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/concordmap/concord/node/internal/rpctest"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

func TestHub_RealConnection(t *testing.T) {
	reg := newFakeRegistry(100)
	reg.addSession("s1", "p1")
	sessions := rpctest.NewSessions()
	srv, err := rpc.NewServer(rpc.DefaultConfig(), sessions)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	defer func() { _ = srv.Shutdown(ctx) }()
	box := rpctest.NewInbox(MethodEvent, 64)
	cli, err := srv.ServeConn(ctx, box)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Call(ctx, rpctest.AttachMethod, map[string]string{"session": "s1"}); err != nil {
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

	res, err := h.Subscribe(ctx, "s1", 1, json.RawMessage(`{"filter":{"eventTypes":["agent.registered"]}}`))
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
		case raw := <-box.C:
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
