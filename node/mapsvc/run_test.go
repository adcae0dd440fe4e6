package mapsvc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
)

func TestDisconnectPolicies(t *testing.T) {
	cases := []struct {
		behavior   string
		afterClose string // agent state right after the connection drops; "" = unregistered
		afterGrace string
	}{
		{registry.BehaviorUnregister, "", ""},
		{registry.BehaviorOrphan, registry.StateOrphaned, registry.StateOrphaned},
		{registry.BehaviorGracePeriod, registry.StateOrphaned, ""},
	}
	for _, tc := range cases {
		t.Run(tc.behavior, func(t *testing.T) {
			e := newEnv(t)
			c := e.dial()
			res := connectAs(c, TypeAgent, map[string]any{"disconnectPolicy": map[string]any{
				"agentBehavior": tc.behavior, "gracePeriodMs": 30_000}})
			sid := res["sessionId"].(string)
			c.must("map/agents/register", `{"agentId":"a1"}`)
			_ = c.conn.Close("drop")
			<-c.conn.Done()
			state := func() string {
				a, ok := e.reg.Agent("a1")
				if !ok {
					return ""
				}
				return a.State
			}
			eventually(t, 5*time.Second, func() error {
				if s, _ := e.reg.Session(sid); s.Connected {
					return fmt.Errorf("not detached yet")
				}
				return nil
			})
			if got := state(); got != tc.afterClose {
				t.Fatalf("after close: %q, want %q", got, tc.afterClose)
			}
			ctx := context.Background()
			e.clock.Advance(29 * time.Second)
			e.svc.sweep(ctx)
			if got := state(); got != tc.afterClose {
				t.Fatalf("before the grace deadline: %q", got)
			}
			e.clock.Advance(time.Second)
			e.svc.sweep(ctx)
			if got := state(); got != tc.afterGrace {
				t.Fatalf("after grace: %q, want %q", got, tc.afterGrace)
			}
			if _, ok := e.reg.Session(sid); !ok {
				t.Fatal("session gone before its TTL")
			}
			e.clock.Advance(time.Hour)
			e.svc.sweep(ctx)
			if _, ok := e.reg.Session(sid); ok {
				t.Fatal("session not expired after the TTL")
			}
		})
	}
}

func TestRun_OnlyLeaderExpires(t *testing.T) {
	var leader atomic.Bool
	e := newEnv(t, func(c *Config) {
		c.IsLeader = leader.Load
		c.ExpiryInterval = 10 * time.Millisecond
		c.DetachedSessionTTL = time.Minute
	})
	c := e.dial()
	sid := connectAs(c, TypeClient, nil)["sessionId"].(string)
	_ = c.conn.Close("drop")
	<-c.conn.Done()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := e.svc.Run(ctx); err != context.Canceled {
			t.Errorf("Run returned %v", err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	eventually(t, 5*time.Second, func() error {
		if s, _ := e.reg.Session(sid); s.Connected {
			return fmt.Errorf("not detached")
		}
		return nil
	})
	e.clock.Advance(2 * time.Minute)
	// Not the leader: nothing is proposed, however long we wait for a few
	// loop turns (the store's applied index is the witness).
	idx := e.store.AppliedIndex()
	for i := 0; i < 5; i++ {
		e.svc.sweep(ctx)
	}
	if e.store.AppliedIndex() != idx {
		t.Fatal("a non-leader proposed")
	}
	leader.Store(true)
	eventually(t, 5*time.Second, func() error {
		if _, ok := e.reg.Session(sid); ok {
			return fmt.Errorf("session not expired")
		}
		return nil
	})
}

func TestRun_ClosesConnectionsMovedToAnotherNode(t *testing.T) {
	e1 := newEnv(t)
	e2 := newEnvOn(t, e1.reg, e1.store, "n2")
	c1 := e1.dial()
	res := connectAs(c1, TypeAgent, map[string]any{"participantId": "p"})
	c1.must("map/agents/register", `{"agentId":"a"}`)
	sid := res["sessionId"].(string)

	// The participant resumes on node n2 while its old connection on n1
	// is still open (a half-dead link).
	c2 := e2.dial()
	r := connectAs(c2, TypeAgent, map[string]any{"resumeToken": res["resumeToken"]})
	if r["reconnected"] != true {
		t.Fatalf("resume on n2 %v", r)
	}
	if a, _ := e1.reg.Agent("a"); a.HomeNode != "n2" {
		t.Fatalf("agent not re-homed: %+v", a)
	}
	e1.svc.sweep(context.Background())
	select {
	case <-c1.conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("n1 kept the moved session's connection")
	}
	// n1's Closed sees the newer epoch: the session stays attached to n2.
	eventually(t, 5*time.Second, func() error {
		if _, ok := e1.svc.Sessions().Conn(sid); ok {
			return fmt.Errorf("n1 still lists the session")
		}
		return nil
	})
	if s, _ := e1.reg.Session(sid); !s.Connected || s.HomeNode != "n2" {
		t.Fatalf("session after n1 closed its connection: %+v", s)
	}
}

func TestRun_DetachesSessionsOfDeadNodes(t *testing.T) {
	var n2Alive atomic.Bool
	n2Alive.Store(true)
	e1 := newEnv(t, func(c *Config) { c.NodeAlive = func(id string) bool { return id != "n2" || n2Alive.Load() } })
	e2 := newEnvOn(t, e1.reg, e1.store, "n2")
	c := e2.dial()
	res := connectAs(c, TypeAgent, map[string]any{"disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	c.must("map/agents/register", `{"agentId":"a"}`)
	e1.svc.sweep(context.Background())
	if s, _ := e1.reg.Session(res["sessionId"].(string)); !s.Connected {
		t.Fatal("detached while n2 alive")
	}
	n2Alive.Store(false)
	e1.svc.sweep(context.Background())
	if s, _ := e1.reg.Session(res["sessionId"].(string)); s.Connected {
		t.Fatal("session of a dead node still connected")
	}
	if a, _ := e1.reg.Agent("a"); a.State != registry.StateOrphaned {
		t.Fatalf("agent %+v", a)
	}
}

func TestConfig_Validate(t *testing.T) {
	reg, _ := registry.New(registry.DefaultConfig())
	good := DefaultConfig()
	good.NodeID, good.Registry, good.Store, good.IsLeader = "n", reg, &nopProposer{}, func() bool { return true }
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Config){
		"node":     func(c *Config) { c.NodeID = "" },
		"store":    func(c *Config) { c.Store = nil },
		"registry": func(c *Config) { c.Registry = nil },
		"leader":   func(c *Config) { c.IsLeader = nil },
		"ttl":      func(c *Config) { c.DetachedSessionTTL = 0 },
		"policy":   func(c *Config) { c.DefaultDisconnectPolicy.AgentBehavior = "x" },
		"interval": func(c *Config) { c.ExpiryInterval = 0 },
		"page":     func(c *Config) { c.MaxPageSize = 0 },
	}
	for name, mut := range cases {
		cfg := good
		mut(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
}

// runService runs e.svc.Run until the test ends.
func runService(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := e.svc.Run(ctx); err != context.Canceled {
			t.Errorf("Run returned %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestRun_ActsOnEventsWithoutTheTicker: with the ticker an hour away, Run
// still closes a connection whose session resumed on another node, and
// proposes an expiry that is due when a session detaches: the events that
// can make work (a re-attach, a detach) wake it, while connects alone do
// not make it scan every session.
func TestRun_ActsOnEventsWithoutTheTicker(t *testing.T) {
	hour := func(c *Config) { c.ExpiryInterval = time.Hour }
	e1 := newEnv(t, hour)
	e2 := newEnvOn(t, e1.reg, e1.store, "n2", hour)
	runService(t, e1)

	// Several connects (events that need no work), then a resume elsewhere.
	c1 := e1.dial()
	res := connectAs(c1, TypeAgent, map[string]any{"participantId": "p"})
	for range 3 {
		connectAs(e1.dial(), TypeClient, nil)
	}
	if r := connectAs(e2.dial(), TypeAgent, map[string]any{"resumeToken": res["resumeToken"]}); r["reconnected"] != true {
		t.Fatalf("resume on n2 %v", r)
	}
	select {
	case <-c1.conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("n1 kept the moved session's connection until its ticker")
	}

	// A session in its grace period, whose deadline passes with no event;
	// the next detach (another session's) makes Run look, and expire it.
	g := e1.dial()
	sid := connectAs(g, TypeAgent, map[string]any{"disconnectPolicy": map[string]any{
		"agentBehavior": registry.BehaviorGracePeriod, "gracePeriodMs": 1_000}})["sessionId"].(string)
	g.must("map/agents/register", `{"agentId":"ga"}`)
	other := e1.dial()
	connectAs(other, TypeClient, nil)
	_ = g.conn.Close("drop")
	eventually(t, 5*time.Second, func() error {
		if s, _ := e1.reg.Session(sid); s.Connected {
			return fmt.Errorf("not detached yet")
		}
		return nil
	})
	e1.clock.Advance(2 * time.Second)
	_ = other.conn.Close("drop")
	eventually(t, 5*time.Second, func() error {
		if _, ok := e1.reg.Agent("ga"); ok {
			return fmt.Errorf("grace expiry not proposed")
		}
		return nil
	})
}

// TestRun_FalseNodeFailureDoesNotStrandOpenConnection: the leader (n1)
// detaches the session of n2, which gossip wrongly declared failed; n2
// is alive and the agent's connection on it is open. Before, the
// connection stayed open and received nothing (routing saw the session
// detached, its agent orphaned). Now n2 closes it with the reconnect code
// (on the detach event; the ticker is an hour away) and the client's
// resume brings the agent back to it, routable again.
func TestRun_FalseNodeFailureDoesNotStrandOpenConnection(t *testing.T) {
	hour := func(c *Config) { c.ExpiryInterval = time.Hour }
	var n2Alive atomic.Bool
	n2Alive.Store(true)
	e1 := newEnv(t, hour, func(c *Config) { c.NodeAlive = func(id string) bool { return id != "n2" || n2Alive.Load() } })
	e2 := newEnvOn(t, e1.reg, e1.store, "n2", hour)
	runService(t, e2)

	c := e2.dial()
	res := connectAs(c, TypeAgent, map[string]any{"participantId": "p", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	c.must("map/agents/register", `{"agentId":"a"}`)
	sid := res["sessionId"].(string)

	n2Alive.Store(false) // the false "member failed"
	e1.svc.sweep(context.Background())
	n2Alive.Store(true) // n2 rejoins; the detach is already committed
	if s, _ := e1.reg.Session(sid); s.Connected {
		t.Fatal("the leader did not detach the session of the node it saw failed")
	}
	select {
	case <-c.conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("n2 kept an open connection whose session the cluster detached: it would receive nothing")
	}

	r := connectAs(e2.dial(), TypeAgent, map[string]any{"resumeToken": res["resumeToken"]})
	if r["reconnected"] != true {
		t.Fatalf("resume on n2 %v", r)
	}
	a, ok := e2.reg.Agent("a")
	if !ok || a.State == registry.StateOrphaned || a.OwnerID != "p" || a.HomeNode != "n2" || a.SessionID != sid {
		t.Fatalf("agent after the resume: %+v (found %v), want owned by p on n2", a, ok)
	}
	if s, _ := e2.reg.Session(sid); !s.Connected || s.HomeNode != "n2" {
		t.Fatalf("session after the resume: %+v", s)
	}
}

// sweep runs one full pass of Run's background duties, as its ticker does.
func (s *Service) sweep(ctx context.Context) {
	s.closeLost()
	s.leaderDuties(ctx)
}
