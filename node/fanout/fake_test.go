package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTimeout = 10 * time.Second

// fakeRegistry is a registry.Reader backed by slices, with an event log
// window of limit events.
type fakeRegistry struct {
	mu       sync.Mutex
	agents   map[string]registry.Agent
	sessions map[string]*registry.Session
	events   []registry.Event
	last     uint64
	limit    int
	notify   chan struct{}
	clock    int64 // event timestamps, ms
}

func newFakeRegistry(limit int) *fakeRegistry {
	return &fakeRegistry{agents: map[string]registry.Agent{}, sessions: map[string]*registry.Session{},
		limit: limit, notify: make(chan struct{}), clock: 1_700_000_000_000}
}

func (f *fakeRegistry) addSession(id, participant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[id] = &registry.Session{ID: id, ParticipantID: participant, ParticipantType: "client", Connected: true}
}

func (f *fakeRegistry) addAgent(a registry.Agent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agents[a.ID] = a
}

// appendEvent appends an event (id and timestamp chosen here) and returns it.
func (f *fakeRegistry) appendEvent(typ string, agentIDs ...string) registry.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock++
	f.last++
	ev := registry.Event{Position: f.last, ID: ulid.MustNew(uint64(f.clock), ulid.DefaultEntropy()).String(), Type: typ,
		Timestamp: f.clock, Source: "p-src", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, f.last)), AgentIDs: agentIDs}
	f.events = append(f.events, ev)
	if len(f.events) > f.limit {
		f.events = slices.Clone(f.events[len(f.events)-f.limit:])
	}
	close(f.notify)
	f.notify = make(chan struct{})
	return ev
}

func (f *fakeRegistry) Agent(id string) (registry.Agent, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.agents[id]
	return a, ok
}
func (f *fakeRegistry) Agents() []registry.Agent { return nil }
func (f *fakeRegistry) AgentsWhere(func(*registry.Agent) bool) []registry.Agent {
	return nil
}
func (f *fakeRegistry) Children(string) []registry.Agent    { return nil }
func (f *fakeRegistry) Scope(string) (registry.Scope, bool) { return registry.Scope{}, false }
func (f *fakeRegistry) Scopes() []registry.Scope            { return nil }
func (f *fakeRegistry) Sessions() []registry.Session        { return nil }
func (f *fakeRegistry) Session(id string) (registry.Session, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok {
		return registry.Session{}, false
	}
	c := *s
	c.Subscriptions = slices.Clone(s.Subscriptions)
	return c, true
}

func (f *fakeRegistry) EventsAfter(pos uint64, limit int) []registry.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []registry.Event
	for _, ev := range f.events {
		if ev.Position > pos && (limit <= 0 || len(out) < limit) {
			out = append(out, ev)
		}
	}
	return out
}

func (f *fakeRegistry) PositionOf(id string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.events {
		if ev.ID == id {
			return ev.Position, true
		}
	}
	return 0, false
}

func (f *fakeRegistry) Window() (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) == 0 {
		return 0, f.last
	}
	return f.events[0].Position, f.last
}

func (f *fakeRegistry) Notify() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notify
}

// fakeProposer applies subscription commands to the fake registry the
// way node/registry does, and counts them.
type fakeProposer struct {
	reg   *fakeRegistry
	mu    sync.Mutex
	count map[concordv1.CommandType]int
	cmds  []proto.Message
	err   error
}

func (p *fakeProposer) Apply(_ context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, 0, p.err
	}
	if p.count == nil {
		p.count = map[concordv1.CommandType]int{}
	}
	p.count[t]++
	p.cmds = append(p.cmds, proto.Clone(m))
	r := p.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := m.(type) {
	case *concordv1.SubscriptionAddRequest:
		rec := m.GetSubscription()
		s, ok := r.sessions[rec.GetSessionId()]
		if !ok {
			return nil, 0, errors.New("no session")
		}
		s.Subscriptions = append(s.Subscriptions, registry.Subscription{ID: rec.GetId(), SessionID: rec.GetSessionId(),
			Filter: rec.GetFilter(), Options: rec.GetOptions(), CreatedAt: rec.GetCreatedAt(), CursorEventID: rec.GetCursorEventId()})
	case *concordv1.SubscriptionRemoveRequest:
		s := r.sessions[m.GetSessionId()]
		i := slices.IndexFunc(s.Subscriptions, func(x registry.Subscription) bool { return x.ID == m.GetSubscriptionId() })
		if i < 0 {
			return nil, 0, &registry.Error{Code: registry.CodeInvalidParams, Field: "subscriptionId", Message: "not found"}
		}
		s.Subscriptions = slices.Delete(s.Subscriptions, i, i+1)
	case *concordv1.SubscriptionCursorRequest:
		for _, c := range m.GetCursors() {
			s := r.sessions[c.GetSessionId()]
			for i := range s.Subscriptions {
				if sub := &s.Subscriptions[i]; sub.ID == c.GetSubscriptionId() && c.GetSeq() > sub.CursorSeq {
					sub.CursorSeq, sub.CursorEventID = c.GetSeq(), c.GetEventId()
				}
			}
		}
	default:
		return nil, 0, fmt.Errorf("unexpected command %v", t)
	}
	return nil, 1, nil
}

func (p *fakeProposer) n(t concordv1.CommandType) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[t]
}

// fakeConn records notifications. While refuse is set (or after budget
// accepted sends, when budget >= 0) it returns rpc.ErrSlowConsumer.
type fakeConn struct {
	mu     sync.Mutex
	refuse bool
	budget int // < 0: unlimited
	got    []note
}

type note struct {
	method string
	params json.RawMessage
}

func newConn() *fakeConn { return &fakeConn{budget: -1} }

func (c *fakeConn) NotifyRaw(method string, params json.RawMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse || c.budget == 0 {
		return rpc.ErrSlowConsumer
	}
	if c.budget > 0 {
		c.budget--
	}
	c.got = append(c.got, note{method, append(json.RawMessage(nil), params...)})
	return nil
}

func (c *fakeConn) set(refuse bool, budget int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse, c.budget = refuse, budget
}

func (c *fakeConn) notes() []note {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// eventNote is a decoded map/event notification.
type eventNote struct {
	SubscriptionID string   `json:"subscriptionId"`
	SequenceNumber uint64   `json:"sequenceNumber"`
	EventID        string   `json:"eventId"`
	Timestamp      int64    `json:"timestamp"`
	CausedBy       []string `json:"causedBy"`
	Event          struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Timestamp int64           `json:"timestamp"`
		Source    string          `json:"source"`
		Data      json.RawMessage `json:"data"`
		CausedBy  []string        `json:"causedBy"`
	} `json:"event"`
}

// events decodes the map/event notifications of one subscription.
func (c *fakeConn) events(t *testing.T, subID string) []eventNote {
	t.Helper()
	var out []eventNote
	for _, n := range c.notes() {
		if n.method != MethodEvent {
			continue
		}
		var e eventNote
		if err := json.Unmarshal(n.params, &e); err != nil {
			t.Fatalf("bad map/event %s: %v", n.params, err)
		}
		if subID == "" || e.SubscriptionID == subID {
			out = append(out, e)
		}
	}
	return out
}

type sessionsNone struct{}

func (sessionsNone) Conn(string) (*rpc.Conn, bool) { return nil, false }

// harness is a Hub over fakes with Run started.
type harness struct {
	reg   *fakeRegistry
	prop  *fakeProposer
	hub   *Hub
	conns map[string]*fakeConn
	mu    sync.Mutex
}

func (hs *harness) conn(session string) *fakeConn {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	c := hs.conns[session]
	if c == nil {
		c = newConn()
		hs.conns[session] = c
	}
	return c
}

func testConfig(reg *fakeRegistry, prop *fakeProposer) Config {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Registry, cfg.Sessions, cfg.Proposer = "n1", reg, sessionsNone{}, prop
	cfg.ActivationDelay = 0
	cfg.RetryInterval = 2 * time.Millisecond
	cfg.CursorFlushInterval = time.Hour // tests flush explicitly unless they say otherwise
	return cfg
}

// newHarness starts a Hub (Run included, stopped at cleanup) over reg.
func newHarness(t *testing.T, reg *fakeRegistry, tweak func(*Config)) *harness {
	t.Helper()
	hs := &harness{reg: reg, prop: &fakeProposer{reg: reg}, conns: map[string]*fakeConn{}}
	cfg := testConfig(reg, hs.prop)
	if tweak != nil {
		tweak(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.conns = func(id string) (notifier, bool) {
		hs.mu.Lock()
		defer hs.mu.Unlock()
		c, ok := hs.conns[id]
		return c, ok
	}
	hs.hub = h
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Error("Run did not return")
		}
	})
	return hs
}

func (hs *harness) subscribe(t *testing.T, session, params string) string {
	t.Helper()
	res, err := hs.hub.Subscribe(context.Background(), session, 1, json.RawMessage(params))
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", params, err)
	}
	return res.(SubscribeResult).SubscriptionID
}

// eventually checks cond now and every 5 ms until it returns nil, failing
// the test with the last error after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		<-tick.C
	}
}

// waitEvents waits until the subscription got n events and returns them.
func waitEvents(t *testing.T, c *fakeConn, subID string, n int) []eventNote {
	t.Helper()
	var evs []eventNote
	eventually(t, testTimeout, func() error {
		if evs = c.events(t, subID); len(evs) < n {
			return fmt.Errorf("subscription %s got %d events, want %d", subID, len(evs), n)
		}
		return nil
	})
	return evs
}

// checkDense fails unless evs carry sequence numbers from+0, from+1, ...
// and exactly the wanted event ids.
func checkDense(t *testing.T, evs []eventNote, from uint64, want []string) {
	t.Helper()
	var got []string
	for i, e := range evs {
		if e.SequenceNumber != from+uint64(i) {
			t.Fatalf("event %d has sequenceNumber %d, want %d", i, e.SequenceNumber, from+uint64(i))
		}
		got = append(got, e.EventID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("event ids\n got %v\nwant %v", got, want)
	}
}

func ids(evs []registry.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}
