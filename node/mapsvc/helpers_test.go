package mapsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
	"github.com/concordmap/concord/raftstore/testlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a settable clock (ms).
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func newClock() *fakeClock                   { c := &fakeClock{}; c.ms.Store(1_750_000_000_000); return c }
func testLogger(t testing.TB, node string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

// fakeRouter records sends and answers with a message id.
type fakeRouter struct {
	mu    sync.Mutex
	sends []routerCall
	err   error
}

type routerCall struct {
	from   Sender
	params json.RawMessage
}

func (r *fakeRouter) Send(_ context.Context, from Sender, params json.RawMessage) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends = append(r.sends, routerCall{from, append(json.RawMessage(nil), params...)})
	if r.err != nil {
		return nil, r.err
	}
	return map[string]any{"messageId": "m-1", "delivered": []string{}}, nil
}

// HandleSend answers synchronously: deferral is node/router's and
// node/rpc's business, tested there.
func (r *fakeRouter) HandleSend(ctx context.Context, from Sender, params json.RawMessage) (any, error) {
	return r.Send(ctx, from, params)
}

func (r *fakeRouter) calls() []routerCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]routerCall(nil), r.sends...)
}

// fakeFanout records what the service delegates.
type fakeFanout struct {
	mu       sync.Mutex
	log      []string
	attached map[string]int
	epochs   []uint64 // the connection epoch of each Subscribe, Unsubscribe and Attach
}

func (f *fakeFanout) rec(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, s)
}

func (f *fakeFanout) epoch(e uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epochs = append(f.epochs, e)
}

func (f *fakeFanout) Subscribe(_ context.Context, sid string, epoch uint64, p json.RawMessage) (any, error) {
	f.epoch(epoch)
	f.rec("subscribe " + sid + " " + string(p))
	return map[string]any{"subscriptionId": "sub-1"}, nil
}
func (f *fakeFanout) Unsubscribe(_ context.Context, sid string, epoch uint64, p json.RawMessage) (any, error) {
	f.epoch(epoch)
	f.rec("unsubscribe " + sid)
	return map[string]any{"unsubscribed": true}, nil
}
func (f *fakeFanout) Replay(_ context.Context, sid string, p json.RawMessage) (any, error) {
	f.rec("replay " + sid)
	return map[string]any{"events": []any{}, "hasMore": false}, nil
}
func (f *fakeFanout) Ack(_ context.Context, sid string, p json.RawMessage) error {
	f.rec("ack " + sid)
	return nil
}
func (f *fakeFanout) Attach(_ context.Context, sid string, epoch uint64) error {
	f.epoch(epoch)
	f.rec("attach " + sid)
	return nil
}
func (f *fakeFanout) Detach(sid string) { f.rec("detach " + sid) }

func (f *fakeFanout) entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

// env is one node: a real single-node raftstore with the registry, the
// service, and an rpc server for in-process clients.
type env struct {
	t      testing.TB
	reg    *registry.State
	store  *raftstore.Store
	svc    *Service
	srv    *rpc.Server
	clock  *fakeClock
	router *fakeRouter
	fanout *fakeFanout
}

func newEnv(t testing.TB, mut ...func(*Config)) *env {
	t.Helper()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	store := raftstore.NewTestStore(t, reg)
	// Settle the log (the bootstrap configuration entry reaches the FSM
	// asynchronously) so AppliedIndex only moves for our commands.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.LinearizableRead(ctx); err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, reg, store, "n1", mut...)
}

// newEnvOn builds a service for another node id on an existing store, to
// simulate a second node sharing the replicated state.
func newEnvOn(t testing.TB, reg *registry.State, store *raftstore.Store, node string, mut ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, reg: reg, store: store, clock: newClock(), router: &fakeRouter{}, fanout: &fakeFanout{}}
	cfg := DefaultConfig()
	cfg.NodeID = node
	cfg.Store = store
	cfg.Registry = reg
	cfg.IsLeader = store.IsLeader
	cfg.WaitApplied = store.WaitApplied
	cfg.AppliedIndex = store.AppliedIndex
	cfg.LinearizableRead = store.LinearizableRead
	cfg.Router = e.router
	cfg.Fanout = e.fanout
	cfg.Clock = e.clock.Now
	cfg.Logger = testLogger(t, node)
	for _, f := range mut {
		f(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	rcfg := rpc.DefaultConfig()
	rcfg.Logger = cfg.Logger
	srv, err := rpc.NewServer(rcfg, svc)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("rpc shutdown: %v", err)
		}
	})
	return e
}

// client is an in-process MAP peer.
type client struct {
	t    testing.TB
	conn *rpc.Conn
}

func (e *env) dial() *client {
	e.t.Helper()
	c, err := e.srv.ServeConn(context.Background(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close("test done"); <-c.Done() })
	return &client{t: e.t, conn: c}
}

// call sends a request; params may be nil, a string of raw JSON, or a value.
func (c *client) call(method string, params any) (map[string]any, *rpc.Error) {
	c.t.Helper()
	if s, ok := params.(string); ok {
		params = json.RawMessage(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.conn.Call(ctx, method, params)
	if err != nil {
		var re *rpc.Error
		if errors.As(err, &re) {
			return nil, re
		}
		c.t.Fatalf("%s: transport error %v", method, err)
	}
	var out map[string]any
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &out); err != nil {
			c.t.Fatalf("%s: result %s: %v", method, raw, err)
		}
	}
	return out, nil
}

func (c *client) must(method string, params any) map[string]any {
	c.t.Helper()
	out, err := c.call(method, params)
	if err != nil {
		c.t.Fatalf("%s: %v (data %+v)", method, err, err.Data)
	}
	return out
}

// fails checks the error code (and, for -32602, the field).
func (c *client) fails(method string, params any, code int, field ...string) *rpc.Error {
	c.t.Helper()
	out, err := c.call(method, params)
	if err == nil {
		c.t.Fatalf("%s: want error %d, got result %v", method, code, out)
	}
	if err.Code != code {
		c.t.Fatalf("%s: got error %d %q (data %+v), want %d", method, err.Code, err.Message, err.Data, code)
	}
	if len(field) > 0 {
		if got := err.Data.Details["field"]; got != field[0] {
			c.t.Fatalf("%s: field %v, want %q (%s)", method, got, field[0], err.Message)
		}
	}
	return err
}

// refused checks that a failing request wrote nothing to the Raft log.
func (e *env) refused(c *client, method string, params any, code int, field ...string) {
	e.t.Helper()
	before := e.store.AppliedIndex()
	c.fails(method, params, code, field...)
	if after := e.store.AppliedIndex(); after != before {
		e.t.Fatalf("%s: refused request wrote to the log (index %d -> %d)", method, before, after)
	}
}

func connectAs(c *client, ptype string, extra map[string]any) map[string]any {
	c.t.Helper()
	p := map[string]any{"protocolVersion": 1, "participantType": ptype}
	for k, v := range extra {
		p[k] = v
	}
	return c.must("map/connect", p)
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func agentOf(res map[string]any) map[string]any {
	a, _ := res["agent"].(map[string]any)
	return a
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// nopProposer is a Proposer for tests that never propose.
type nopProposer struct{}

func (*nopProposer) Apply(context.Context, concordv1.CommandType, proto.Message) (any, uint64, error) {
	return nil, 0, errors.New("nop proposer")
}
