package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/fanout"
	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/raftstore"
)

// node is one real single-node stack: raftstore with the registry and runs
// modules, mapsvc with the runs extension methods and service endpoint,
// router, fanout, and the runs Service driving on the store's leadership.
type node struct {
	t   *testing.T
	srv *rpc.Server
	mod *Module
}

func newNode(t *testing.T) *node {
	t.Helper()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mcfg := DefaultConfig()
	mcfg.Events = reg
	mod, err := New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	store := raftstore.NewTestStore(t, reg, mod)
	log := testLogger(t)
	sessions := mapsvc.NewSessions()

	fcfg := fanout.DefaultConfig()
	fcfg.NodeID, fcfg.Registry, fcfg.Sessions, fcfg.Proposer = "n1", reg, sessions, store
	fcfg.WaitApplied, fcfg.Logger = store.WaitApplied, log
	hub, err := fanout.New(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := router.DefaultConfig()
	rcfg.NodeID, rcfg.Registry, rcfg.Sessions, rcfg.Events, rcfg.Logger = "n1", reg, sessions, hub, log
	rt, err := router.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := DefaultServiceConfig()
	scfg.NodeID, scfg.Module, scfg.Store, scfg.Agents = "n1", mod, store, reg
	scfg.Messenger, scfg.Leadership, scfg.IsLeader, scfg.WaitApplied = rt, store, store.IsLeader, store.WaitApplied
	scfg.Logger = log
	runsSvc, err := NewService(scfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.RegisterService(ServiceID, runsSvc); err != nil {
		t.Fatal(err)
	}
	cfg := mapsvc.DefaultConfig()
	cfg.NodeID, cfg.Sessions, cfg.Store, cfg.Registry = "n1", sessions, store, reg
	cfg.IsLeader, cfg.WaitApplied, cfg.LinearizableRead = store.IsLeader, store.WaitApplied, store.LinearizableRead
	cfg.Router, cfg.Fanout, cfg.Logger = rt, hub, log
	cfg.Extensions = []mapsvc.Extension{{URI: ExtensionURI, Version: ExtensionVersion}}
	cfg.ExtensionMethods = runsSvc.Methods()
	svc, err := mapsvc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rpc.NewServer(rpc.DefaultConfig(), svc)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{hub.Run, svc.Run, runsSvc.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("run loop: %v", err)
			}
		})
	}
	// Shutdown order (cleanups run last-in first-out, after the store's
	// own cleanup was registered): connections, then the loops, then raft.
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("rpc shutdown: %v", err)
		}
		cancel()
		wg.Wait()
	})
	return &node{t: t, srv: srv, mod: mod}
}

// peer is an in-process MAP connection that collects notifications.
type peer struct {
	t      *testing.T
	conn   *rpc.Conn
	mu     sync.Mutex
	events []json.RawMessage
	onMsg  func(msg json.RawMessage)
}

func (p *peer) Handle(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	switch req.Method {
	case fanout.MethodEvent:
		p.mu.Lock()
		p.events = append(p.events, append(json.RawMessage(nil), req.Params...))
		p.mu.Unlock()
	case router.MethodMessage:
		if p.onMsg != nil {
			p.onMsg(append(json.RawMessage(nil), req.Params...))
		}
	}
	return nil, nil
}

func (p *peer) Closed(*rpc.Conn) {}

func (n *node) dial(onMsg func(json.RawMessage)) *peer {
	n.t.Helper()
	p := &peer{t: n.t, onMsg: onMsg}
	c, err := n.srv.ServeConn(context.Background(), p)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = c.Close("test done"); <-c.Done() })
	p.conn = c
	return p
}

func (p *peer) must(method string, params any) map[string]any {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := p.conn.Call(ctx, method, params)
	if err != nil {
		p.t.Fatalf("%s: %v", method, err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// eventTypes lists the types of the map/event notifications received.
func (p *peer) eventTypes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, raw := range p.events {
		var ev struct{ Event struct{ Type string } }
		_ = json.Unmarshal(raw, &ev)
		out = append(out, ev.Event.Type)
	}
	return out
}

// personaAgent connects an agent that answers every task message like
// consensus.Persona, replying the way AgentConnection.reply does:
// map/send to the message's `from` with meta {isResult, correlationId}.
func (n *node) personaAgent(id string) {
	n.t.Helper()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	var p *peer
	p = n.dial(func(params json.RawMessage) {
		var m struct {
			Message struct {
				From    string          `json:"from"`
				To      json.RawMessage `json:"to"`
				Payload json.RawMessage `json:"payload"`
				Meta    json.RawMessage `json:"meta"`
			} `json:"message"`
		}
		if err := json.Unmarshal(params, &m); err != nil {
			n.t.Errorf("agent %s: message %v", id, err)
			return
		}
		inner, _ := json.Marshal(m.Message)
		task, _, err := taskFromMessage(inner)
		if err != nil || m.Message.From != ServiceID {
			n.t.Errorf("agent %s: task message from %q: %v", id, m.Message.From, err)
			return
		}
		// The rpc reader must not block on a Call: answer from a goroutine.
		wg.Go(func() {
			out, err := consensus.Persona{}.Answer(task)
			if err != nil {
				n.t.Errorf("agent %s: %v", id, err)
				return
			}
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			_, err = p.conn.Call(cctx, "map/send", map[string]any{"to": m.Message.From, "payload": out,
				"meta": map[string]any{"isResult": true, "correlationId": task.ID}})
			if err != nil && ctx.Err() == nil {
				n.t.Errorf("agent %s reply: %v", id, err)
			}
		})
	})
	n.t.Cleanup(func() { cancel(); wg.Wait() })
	p.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": id})
	p.must("map/agents/register", map[string]any{"agentId": id})
}

// TestIntegration_RunOverMAP drives a whole run through the real MAP
// stack: a client subscribes to x-concord.run.* and starts the run, three
// agents get their tasks as map/message and reply with map/send to
// "concord.runs", and the result equals consensus.Simulate's.
func TestIntegration_RunOverMAP(t *testing.T) {
	n := newNode(t)
	for _, id := range []string{"p1", "p2", "p3"} {
		n.personaAgent(id)
	}
	cl := n.dial(nil)
	res := cl.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": "client", "participantId": "cli"})
	caps, _ := json.Marshal(res["capabilities"])
	var c struct{ Extensions []mapsvc.Extension }
	_ = json.Unmarshal(caps, &c)
	if !slices.Contains(c.Extensions, mapsvc.Extension{URI: ExtensionURI, Version: ExtensionVersion}) {
		t.Fatalf("capabilities.extensions %s", caps)
	}
	cl.must("map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": []string{"x-concord.run.*"}}})

	var req map[string]any
	_ = json.Unmarshal([]byte(request3), &req)
	started := cl.must(MethodStart, map[string]any{"request": req})
	id, _ := started["runId"].(string)
	eventually(t, 30*time.Second, func() error {
		if types := cl.eventTypes(); !slices.Contains(types, EventTypePrefix+consensus.EventFinalized) {
			return fmt.Errorf("events so far %v", types)
		}
		return nil
	})
	got := cl.must(MethodGet, map[string]any{"runId": id, "include": []string{"result", "events"}})
	run, _ := got["run"].(map[string]any)
	if run["status"] != StatusFinished {
		t.Fatalf("run %v", run["status"])
	}
	local := runLocal(t, id, request3)
	if g, w := timingFree(t, run["result"]), timingFree(t, local.Result); g != w {
		t.Fatalf("result over MAP differs from Simulate:\n got %.2000s\nwant %.2000s", g, w)
	}
	// The subscriber saw every run event, once, in order.
	types := cl.eventTypes()
	evs, _ := run["events"].([]any)
	if len(types) != len(evs) {
		t.Fatalf("subscriber got %d events, run has %d: %v", len(types), len(evs), types)
	}
	for i, raw := range evs {
		if want := EventTypePrefix + raw.(map[string]any)["type"].(string); types[i] != want {
			t.Fatalf("event %d: %s, want %s", i, types[i], want)
		}
	}
}
