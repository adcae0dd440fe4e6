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
