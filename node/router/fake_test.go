package router

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// fakeRegistry is a registry.Reader backed by slices, for tests.
type fakeRegistry struct {
	agents   []registry.Agent
	scopes   []registry.Scope
	sessions []registry.Session
}

func (f *fakeRegistry) Agent(id string) (registry.Agent, bool) {
	for _, a := range f.agents {
		if a.ID == id {
			return a, true
		}
	}
	return registry.Agent{}, false
}

func (f *fakeRegistry) Agents() []registry.Agent {
	return f.AgentsWhere(func(*registry.Agent) bool { return true })
}

func (f *fakeRegistry) AgentsWhere(pred func(*registry.Agent) bool) []registry.Agent {
	var out []registry.Agent
	for _, a := range f.agents {
		if pred(&a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b registry.Agent) int { return cmpStr(a.ID, b.ID) })
	return out
}

func (f *fakeRegistry) Children(parentID string) []registry.Agent {
	return f.AgentsWhere(func(a *registry.Agent) bool { return a.Parent == parentID })
}

func (f *fakeRegistry) Scope(id string) (registry.Scope, bool) {
	for _, s := range f.scopes {
		if s.ID == id {
			return s, true
		}
	}
	return registry.Scope{}, false
}

func (f *fakeRegistry) Scopes() []registry.Scope { return f.scopes }

func (f *fakeRegistry) Session(id string) (registry.Session, bool) {
	for _, s := range f.sessions {
		if s.ID == id {
			return s, true
		}
	}
	return registry.Session{}, false
}

func (f *fakeRegistry) Sessions() []registry.Session             { return f.sessions }
func (f *fakeRegistry) EventsAfter(uint64, int) []registry.Event { return nil }
func (f *fakeRegistry) PositionOf(string) (uint64, bool)         { return 0, false }
func (f *fakeRegistry) Window() (uint64, uint64)                 { return 0, 0 }
func (f *fakeRegistry) Notify() <-chan struct{}                  { return make(chan struct{}) }

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fakeConn records notifications; err (if set) is returned instead.
type fakeConn struct {
	mu   sync.Mutex
	err  error
	msgs []json.RawMessage
}

func (c *fakeConn) NotifyRaw(method string, params json.RawMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if method != MethodMessage {
		panic("unexpected method " + method)
	}
	c.msgs = append(c.msgs, append(json.RawMessage(nil), params...))
	return nil
}

func (c *fakeConn) received() []json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// fakeSink records ephemeral events.
type fakeSink struct {
	mu     sync.Mutex
	subs   bool
	events []registry.Event
}

func (s *fakeSink) PublishEphemeral(ev registry.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
}

func (s *fakeSink) HasSubscribers() bool { return s.subs }

// fakePeers records forwarded envelopes; err (if set) fails them.
type fakePeers struct {
	mu   sync.Mutex
	err  error
	sent []relayed
}

type relayed struct {
	node string
	env  Envelope
}

func (r *fakePeers) Submit(_ context.Context, node string, env *Envelope, done func(error)) {
	r.mu.Lock()
	err := r.err
	if err == nil {
		r.sent = append(r.sent, relayed{node, *env})
	}
	r.mu.Unlock()
	done(err)
}

type noSessions struct{}

func (noSessions) Conn(string) (*rpc.Conn, bool) { return nil, false }

// testRouter builds a Router over reg whose local connections are fakes.
func testRouter(t testing.TB, reg registry.Reader, conns map[string]*fakeConn, sink EventSink, peers Peers) *Router {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Registry, cfg.Sessions = "n1", reg, noSessions{}
	if sink != nil {
		cfg.Events = sink
	}
	if peers != nil {
		cfg.Peers = peers
	}
	cfg.Now = func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.conns = func(id string) (notifier, bool) {
		c, ok := conns[id]
		return c, ok
	}
	return r
}

func errSlow() error { return rpc.ErrSlowConsumer }
