package mapclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/internal/tcpproxy"
	"github.com/concordmap/concord/node/rpc"
)

// collector gathers what handlers receive.
type collector[T any] struct {
	mu    sync.Mutex
	items []T
}

func (c *collector[T]) add(v T) { c.mu.Lock(); c.items = append(c.items, v); c.mu.Unlock() }

func (c *collector[T]) find(pred func(T) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.items {
		if pred(v) {
			return true
		}
	}
	return false
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func registeredEvent(id string) func(mapclient.Event) bool {
	return func(ev mapclient.Event) bool {
		if ev.Type != "agent_registered" {
			return false
		}
		var d struct {
			Agent struct {
				ID string `json:"id"`
			} `json:"agent"`
		}
		return json.Unmarshal(ev.Data, &d) == nil && d.Agent.ID == id
	}
}

func TestClient_ConnectRegisterSendSubscribe(t *testing.T) {
	srv := startNode(t, "n1")
	obs := dial(t, fastConfig(t, mapclient.TypeClient, srv.MAPURL()))
	var events collector[mapclient.Event]
	sub, err := obs.Subscribe(ctxT(t), map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}}, events.add)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if sub.ID() == "" {
		t.Fatal("subscription has no id")
	}

	var msgs collector[mapclient.Message]
	acfg := fastConfig(t, mapclient.TypeAgent, srv.MAPURL())
	acfg.ParticipantID = "alpha"
	acfg.OnMessage = msgs.add
	agent := dial(t, acfg)
	if agent.Session().SessionID == "" || agent.Session().ResumeToken == "" {
		t.Fatalf("session info incomplete: %+v", agent.Session())
	}
	if _, err := agent.RegisterAgent(ctxT(t), mapclient.AgentSpec{AgentID: "alpha", Name: "Alpha"}); err != nil {
		t.Fatalf("register: %v", err)
	}
	eventually(t, 5*time.Second, "agent_registered event", func() bool { return events.find(registeredEvent("alpha")) })

	res, err := obs.Send(ctxT(t), mapclient.SendParams{To: mapclient.AgentAddress{Agent: "alpha"},
		Payload: map[string]string{"hello": "world"}, Meta: map[string]any{"correlationId": "c-1"}})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if res.MessageID == "" || len(res.Delivered) != 1 {
		t.Fatalf("send result %+v", res)
	}
	eventually(t, 5*time.Second, "message at agent", func() bool {
		return msgs.find(func(m mapclient.Message) bool {
			return m.Meta.CorrelationID == "c-1" && string(m.Payload) == `{"hello":"world"}`
		})
	})

	// Errors keep their MAP code through the client's wrapping.
	_, err = obs.Send(ctxT(t), mapclient.SendParams{To: mapclient.AgentAddress{Agent: "nobody"}})
	if err == nil {
		t.Fatal("send to an unknown agent succeeded")
	}
	var rerr *rpc.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("error %v is not an *rpc.Error", err)
	}

	if err := sub.Unsubscribe(ctxT(t)); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
}

func TestClient_DialFailsOverToSecondURL(t *testing.T) {
	srv := startNode(t, "n1")
	c := dial(t, fastConfig(t, mapclient.TypeClient, deadURL(t), srv.MAPURL()))
	if got := c.Session().URL; got != srv.MAPURL() {
		t.Fatalf("connected to %q, want the second URL %q", got, srv.MAPURL())
	}
	if _, err := c.Call(ctxT(t), "map/agents/list", nil); err != nil {
		t.Fatalf("call after failover: %v", err)
	}
}

func TestClient_DialNoServer(t *testing.T) {
	cfg := fastConfig(t, mapclient.TypeClient, deadURL(t), deadURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := mapclient.Dial(ctx, cfg); !errors.Is(err, mapclient.ErrUnreachable) {
		t.Fatalf("dial err = %v, want ErrUnreachable", err)
	}
}

// TestClient_ResumeOnNextURL cuts the client's path to the node and checks
// that it resumes the same session through the second URL: the agent stays
// registered and reachable, the subscription keeps delivering.
func TestClient_ResumeOnNextURL(t *testing.T) {
	srv := startNode(t, "n1")
	p1, p2 := tcpproxy.Start(t, srv.HTTPAddr()), tcpproxy.Start(t, srv.HTTPAddr())
	var msgs collector[mapclient.Message]
	var events collector[mapclient.Event]
	reconnected := make(chan mapclient.ReconnectInfo, 1)
	cfg := fastConfig(t, mapclient.TypeAgent, p1.MAPURL(), p2.MAPURL())
	cfg.ParticipantID = "beta"
	cfg.DisconnectPolicy = &mapclient.DisconnectPolicy{AgentBehavior: "grace-period", GracePeriodMs: 30_000}
	cfg.OnMessage = msgs.add
	cfg.OnReconnect = func(ri mapclient.ReconnectInfo) { reconnected <- ri }
	agent := dial(t, cfg)
	if _, err := agent.RegisterAgent(ctxT(t), mapclient.AgentSpec{AgentID: "beta"}); err != nil {
		t.Fatalf("register: %v", err)
	}
	sub, err := agent.Subscribe(ctxT(t), map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}}, events.add)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	before := agent.Session()

	p1.Close()
	var ri mapclient.ReconnectInfo
	select {
	case ri = <-reconnected:
	case <-time.After(15 * time.Second):
		t.Fatal("no reconnect")
	}
	if !ri.Resumed || ri.URL != p2.MAPURL() || ri.SessionID != before.SessionID {
		t.Fatalf("reconnect %+v, want resumed session %s via %s", ri, before.SessionID, p2.MAPURL())
	}
	if sub.ID() == "" {
		t.Fatal("subscription lost its id")
	}
	a, ok := srv.Registry().Agent("beta")
	if !ok || a.SessionID != before.SessionID {
		t.Fatalf("agent after resume: %+v (found %v), want session %s", a, ok, before.SessionID)
	}

	obs := dial(t, fastConfig(t, mapclient.TypeClient, srv.MAPURL()))
	if _, err := obs.Send(ctxT(t), mapclient.SendParams{To: mapclient.AgentAddress{Agent: "beta"},
		Meta: map[string]any{"correlationId": "after"}}); err != nil {
		t.Fatalf("send after resume: %v", err)
	}
	eventually(t, 5*time.Second, "message after resume", func() bool {
		return msgs.find(func(m mapclient.Message) bool { return m.Meta.CorrelationID == "after" })
	})
	// The restored subscription (same id) still delivers.
	oc := dial(t, func() mapclient.Config {
		c := fastConfig(t, mapclient.TypeAgent, srv.MAPURL())
		c.ParticipantID = "gamma"
		return c
	}())
	if _, err := oc.RegisterAgent(ctxT(t), mapclient.AgentSpec{AgentID: "gamma"}); err != nil {
		t.Fatalf("register gamma: %v", err)
	}
	eventually(t, 5*time.Second, "event on the restored subscription", func() bool { return events.find(registeredEvent("gamma")) })
}

// TestClient_NewSessionRestores fails over to an unrelated node that does
// not know the session: the client registers its agent again and makes its
// subscription again there.
func TestClient_NewSessionRestores(t *testing.T) {
	n1, n2 := startNode(t, "n1"), startNode(t, "n2")
	var events collector[mapclient.Event]
	reconnected := make(chan mapclient.ReconnectInfo, 1)
	cfg := fastConfig(t, mapclient.TypeAgent, n1.MAPURL(), n2.MAPURL())
	cfg.ParticipantID = "delta"
	cfg.OnReconnect = func(ri mapclient.ReconnectInfo) { reconnected <- ri }
	agent := dial(t, cfg)
	if _, err := agent.RegisterAgent(ctxT(t), mapclient.AgentSpec{AgentID: "delta"}); err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := agent.Subscribe(ctxT(t), map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}}, events.add); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := n1.Shutdown(ctxT(t)); err != nil {
		t.Fatalf("shutdown n1: %v", err)
	}
	var ri mapclient.ReconnectInfo
	select {
	case ri = <-reconnected:
	case <-time.After(15 * time.Second):
		t.Fatal("no reconnect")
	}
	if ri.Resumed || ri.URL != n2.MAPURL() {
		t.Fatalf("reconnect %+v, want a new session on %s", ri, n2.MAPURL())
	}
	if _, ok := n2.Registry().Agent("delta"); !ok {
		t.Fatal("agent not registered again on the new node")
	}
	other := dial(t, func() mapclient.Config {
		c := fastConfig(t, mapclient.TypeAgent, n2.MAPURL())
		c.ParticipantID = "epsilon"
		return c
	}())
	if _, err := other.RegisterAgent(ctxT(t), mapclient.AgentSpec{AgentID: "epsilon"}); err != nil {
		t.Fatalf("register epsilon: %v", err)
	}
	eventually(t, 5*time.Second, "event on the re-made subscription", func() bool { return events.find(registeredEvent("epsilon")) })
}

func TestClient_GivesUpAndCallsFail(t *testing.T) {
	srv := startNode(t, "n1")
	p := tcpproxy.Start(t, srv.HTTPAddr())
	cfg := fastConfig(t, mapclient.TypeClient, p.MAPURL())
	cfg.ReconnectTimeout = 300 * time.Millisecond
	c := dial(t, cfg)
	p.Close()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client did not give up")
	}
	if !errors.Is(c.Err(), mapclient.ErrUnreachable) {
		t.Fatalf("Err = %v, want ErrUnreachable", c.Err())
	}
	if _, err := c.Call(ctxT(t), "map/agents/list", nil); !errors.Is(err, mapclient.ErrUnreachable) {
		t.Fatalf("call err = %v", err)
	}
}

func TestConfig_Validate(t *testing.T) {
	base := mapclient.DefaultConfig()
	base.URLs = []string{"ws://127.0.0.1:1/map"}
	tests := []struct {
		name string
		mod  func(*mapclient.Config)
		ok   bool
	}{
		{"default", func(*mapclient.Config) {}, true},
		{"no urls", func(c *mapclient.Config) { c.URLs = nil }, false},
		{"http url", func(c *mapclient.Config) { c.URLs = []string{"http://x/map"} }, false},
		{"bad type", func(c *mapclient.Config) { c.ParticipantType = "system" }, false},
		{"backoff order", func(c *mapclient.Config) { c.MaxBackoff = c.MinBackoff / 2 }, false},
		{"no attempt timeout", func(c *mapclient.Config) { c.AttemptTimeout = 0 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			err := c.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, mapclient.ErrInvalidConfig)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
