package mapsvc

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// fakeEndpoint records the sends handed to a service id.
type fakeEndpoint struct {
	mu    sync.Mutex
	calls []routerCall
}

func (f *fakeEndpoint) HandleSend(_ context.Context, from Sender, params json.RawMessage) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, routerCall{from, append(json.RawMessage(nil), params...)})
	return map[string]any{"messageId": "svc-1", "delivered": []string{"svc.x"}}, nil
}

func (f *fakeEndpoint) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func TestExtensions_MethodsMountedWithCaller(t *testing.T) {
	var mu sync.Mutex
	var seen []Sender
	e := newEnv(t, func(c *Config) {
		c.ExtensionMethods = map[string]MethodFunc{
			"x-test/echo": func(_ context.Context, from Sender, params json.RawMessage) (any, error) {
				mu.Lock()
				seen = append(seen, from)
				mu.Unlock()
				return json.RawMessage(params), nil
			},
			"x-test/fail": func(context.Context, Sender, json.RawMessage) (any, error) {
				return nil, rpc.NewError(90000, "nope")
			},
		}
	})
	c := e.dial()
	c.fails("x-test/echo", `{"a":1}`, rpc.CodeAuthRequired)
	connectAs(c, TypeClient, map[string]any{"participantId": "cli"})
	if got := c.must("x-test/echo", `{"a":1}`); got["a"] != float64(1) {
		t.Fatalf("echo = %v", got)
	}
	c.fails("x-test/fail", nil, 90000)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].ParticipantID != "cli" || seen[0].ParticipantType != TypeClient || seen[0].SessionID == "" {
		t.Fatalf("caller = %+v", seen)
	}
}

func TestExtensions_CoreNameRefused(t *testing.T) {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"map/connect", "map/send", "map/agents/list", ""} {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.Store, cfg.Registry, cfg.IsLeader = "n1", &nopProposer{}, reg, func() bool { return true }
		cfg.ExtensionMethods = map[string]MethodFunc{name: func(context.Context, Sender, json.RawMessage) (any, error) { return nil, nil }}
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("extension %q: err %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestExtensions_SendToServiceBypassesRouter(t *testing.T) {
	ep := &fakeEndpoint{}
	e := newEnv(t, func(c *Config) { c.Services = map[string]ServiceEndpoint{"svc.x": ep} })
	ag := e.dial()
	connectAs(ag, TypeAgent, map[string]any{"participantId": "worker"})
	ag.must("map/agents/register", map[string]any{"agentId": "worker"})

	tests := []struct {
		params    string
		toService bool
	}{
		{`{"to":"svc.x","payload":{"kind":"round"}}`, true},
		{`{"to":"agent:svc.x","payload":1}`, true},
		{`{"to":{"agent":"svc.x"},"payload":{},"meta":{"isResult":true,"correlationId":"r/r0/worker"}}`, true},
		{`{"to":{"agents":["svc.x"]}}`, false},
		{`{"to":{"agent":"svc.xy"}}`, false},
		{`{"to":{"agent":"worker"},"payload":"mentions svc.x"}`, false},
		{`{"to":{"scope":"svc.x"}}`, false},
	}
	for _, tc := range tests {
		before, routed := ep.count(), len(e.router.calls())
		ag.must("map/send", tc.params)
		gotService := ep.count() == before+1
		gotRouter := len(e.router.calls()) == routed+1
		if gotService != tc.toService || gotRouter == tc.toService {
			t.Errorf("%s: service=%v router=%v, want service=%v", tc.params, gotService, gotRouter, tc.toService)
		}
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if from := ep.calls[0].from; from.ParticipantID != "worker" || from.AgentID != "worker" {
		t.Fatalf("service saw sender %+v", from)
	}
}

func TestExtensions_ServicesWithoutRouter(t *testing.T) {
	ep := &fakeEndpoint{}
	e := newEnv(t, func(c *Config) {
		c.Router = nil
		c.Services = map[string]ServiceEndpoint{"svc.x": ep}
	})
	c := e.dial()
	connectAs(c, TypeAgent, nil)
	c.must("map/send", `{"to":"svc.x"}`)
	c.fails("map/send", `{"to":"someone"}`, rpc.CodeMethodNotFound)
	if ep.count() != 1 {
		t.Fatalf("endpoint calls = %d", ep.count())
	}
}
