package federation

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fakeServer is a scripted foreign MAP server for proxy sessions: it
// answers map/connect, map/agents/register and map/send, and records the
// sends.
type fakeServer struct {
	mu        sync.Mutex
	sends     []map[string]json.RawMessage
	conns     []*fakeConn
	exists    int  // answer this many registrations with 3000 first
	resumable bool // map/connect resumes a known session
	registers []map[string]any
}

type fakeConn struct {
	s    *fakeServer
	done chan struct{}
	once sync.Once
}

func (s *fakeServer) dial(context.Context, *concordv1.FedMapLink, func(string, json.RawMessage)) (MAPConn, error) {
	c := &fakeConn{s: s, done: make(chan struct{})}
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return c, nil
}

func (s *fakeServer) dropAll() {
	s.mu.Lock()
	cs := s.conns
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }
func (c *fakeConn) Close()                { c.once.Do(func() { close(c.done) }) }

func (c *fakeConn) Call(_ context.Context, method string, params any) (json.RawMessage, error) {
	select {
	case <-c.done:
		return nil, errors.New("closed")
	default:
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := json.Marshal(params)
	switch method {
	case "map/connect":
		var p struct{ SessionID string }
		_ = json.Unmarshal(b, &p)
		if s.resumable && p.SessionID == "S1" {
			return json.RawMessage(`{"sessionId":"S1","reconnected":true,"ownedAgents":["F-alice"]}`), nil
		}
		return json.RawMessage(`{"sessionId":"S1"}`), nil
	case "map/agents/register":
		var p map[string]any
		_ = json.Unmarshal(b, &p)
		s.registers = append(s.registers, p)
		if s.exists > 0 {
			s.exists--
			return nil, &CodeError{Code: codeAgentExists, Message: "exists"}
		}
		return json.RawMessage(`{"agent":{"id":"F-alice"}}`), nil
	case "map/send":
		var p map[string]json.RawMessage
		_ = json.Unmarshal(b, &p)
		s.sends = append(s.sends, p)
		return json.RawMessage(`{"messageId":"M` + string(rune('0'+len(s.sends))) + `"}`), nil
	}
	return nil, &CodeError{Code: -32601, Message: "no"}
}

func (s *fakeServer) registrations() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.registers...)
}

// runProxy runs alice's proxy against srv until the test ends.
func runProxy(t *testing.T, srv *fakeServer) *proxy {
	t.Helper()
	p, _ := testProxy(t, all)
	p.h.l.m.deps.MAPDial = srv.dial
	p.h.l.m.cfg.BackoffMin, p.h.l.m.cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.dropAll() })
	return p
}

func envTo(target, payload string) *concordv1.FedEnvelope {
	return &concordv1.FedEnvelope{SourceSystem: "dc1", TargetSystem: "sdk", MessageId: "m", From: "alice", ToAgent: target, Payload: []byte(payload)}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a fake; no event to wait on
	}
}

// TestProxy_QueueThenDrainInOrder: sends made before the session is up
// are "queued" at once and go out in order once it is; later ones report
// delivered with the foreign recipient.
func TestProxy_QueueThenDrainInOrder(t *testing.T) {
	srv := &fakeServer{exists: 2}
	p, _ := testProxy(t, all)
	var outs []Outcome
	var mu sync.Mutex
	rec := func(o Outcome) { mu.Lock(); outs = append(outs, o); mu.Unlock() }
	for _, pl := range []string{`1`, `2`, `3`} {
		p.push(&item{env: envTo("bob", pl), at: time.Now(), done: rec})
	}
	p.h.l.m.deps.MAPDial = srv.dial
	p.h.l.m.cfg.BackoffMin, p.h.l.m.cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "three sends", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.sends) == 3 })
	srv.mu.Lock()
	sends := srv.sends
	srv.mu.Unlock()
	for i, s := range sends {
		if string(s["payload"]) != string(rune('1'+i)) || string(s["to"]) != `{"agent":"bob"}` {
			t.Fatalf("send %d = %v", i, s)
		}
	}
	// Two 3000s (a previous holder's proxy not yet gone), then the id.
	if regs := srv.registrations(); len(regs) != 3 || regs[2]["agentId"] != "alice" {
		t.Fatalf("registrations %v", regs)
	}
	mu.Lock()
	if len(outs) != 3 || !outs[0].Queued || !outs[2].Queued {
		t.Fatalf("outcomes before the session was up: %+v", outs)
	}
	mu.Unlock()
	ch := make(chan Outcome, 1)
	p.push(&item{env: envTo("bob", `4`), at: time.Now(), done: func(o Outcome) { ch <- o }})
	if o := <-ch; len(o.Delivered) != 1 || o.Delivered[0] != "sdk:agent:bob" {
		t.Fatalf("outcome once up: %+v", o)
	}
}

// TestProxy_ReconnectResumesOrRegisters: a lost connection comes back on
// the same session when the server resumes it (no new registration), and
// registers again when it does not.
func TestProxy_ReconnectResumesOrRegisters(t *testing.T) {
	for _, resumable := range []bool{true, false} {
		srv := &fakeServer{resumable: resumable}
		p := runProxy(t, srv)
		waitFor(t, "proxy up", p.isUp)
		srv.dropAll()
		waitFor(t, "second connection", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.conns) >= 2 })
		waitFor(t, "proxy up again", p.isUp)
		want := 2
		if resumable {
			want = 1
		}
		if got := len(srv.registrations()); got != want {
			t.Fatalf("resumable=%v: %d registrations, want %d", resumable, got, want)
		}
	}
}

// TestProxy_PairsAnswers: a request that expects a response is paired
// with the answer that comes back without meta.
func TestProxy_PairsAnswers(t *testing.T) {
	srv := &fakeServer{}
	p := runProxy(t, srv)
	waitFor(t, "proxy up", p.isUp)
	ch := make(chan Outcome, 1)
	env := envTo("bob", `{"ask":1}`)
	env.Meta = []byte(`{"expectsResponse":true,"correlationId":"task-7"}`)
	p.push(&item{env: env, at: time.Now(), done: func(o Outcome) { ch <- o }})
	<-ch
	d := p.h.l.m.deps.Deliver.(*fakeDeliver)
	p.onNotify("map/message", json.RawMessage(`{"message":{"id":"x","from":"bob","payload":{"answer":1}}}`))
	if len(d.got) != 1 {
		t.Fatalf("delivered %d", len(d.got))
	}
	var m struct {
		Meta struct {
			CorrelationID string `json:"correlationId"`
			IsResult      bool   `json:"isResult"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(d.got[0], &m); err != nil || m.Meta.CorrelationID != "task-7" || !m.Meta.IsResult {
		t.Fatalf("answer delivered as %s", d.got[0])
	}
}
