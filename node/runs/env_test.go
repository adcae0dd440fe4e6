package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// env is one node: a real single-node raftstore (fsync on) holding the
// registry and the runs module, a Service, fake agents behind the Messenger,
// and a leadership switch the test controls.
type env struct {
	t      *testing.T
	reg    *registry.State
	mod    *Module
	store  *raftstore.Store
	svc    *Service
	clock  *testClock
	agents *fakeAgents
	props  *countingProposer
	lead   *fakeLeadership
	stop   func()
}

func newEnv(t *testing.T, mut ...func(*ServiceConfig)) *env {
	t.Helper()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mcfg := DefaultConfig()
	mcfg.Events = reg
	mcfg.Sessions = reg
	mcfg.Logger = testLogger(t)
	mod, err := New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	store := raftstore.NewTestStore(t, reg, mod)
	// Settle the log (the bootstrap configuration entry reaches the FSM
	// asynchronously) so AppliedIndex only moves for our commands.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := store.LinearizableRead(sctx); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, reg: reg, mod: mod, store: store, clock: &testClock{},
		props: &countingProposer{next: store, kinds: map[string]int{}}, lead: &fakeLeadership{}}
	e.agents = newFakeAgents(t, e)
	cfg := DefaultServiceConfig()
	cfg.NodeID = "n1"
	cfg.Module = mod
	cfg.Store = e.props
	cfg.Agents = agentSet{"p1": true, "p2": true, "p3": true, "x": true}
	cfg.Messenger = e.agents
	cfg.Leadership = e.lead
	cfg.IsLeader = store.IsLeader
	cfg.WaitApplied = store.WaitApplied
	cfg.Clock = e.clock.Now
	cfg.Logger = testLogger(t)
	cfg.RetryMin, cfg.RetryMax = 5*time.Millisecond, 20*time.Millisecond
	cfg.TimerCheckInterval = 10 * time.Millisecond
	for _, f := range mut {
		f(&cfg)
	}
	if e.svc, err = NewService(cfg); err != nil {
		t.Fatal(err)
	}
	// Run the service; cleanups run last-in first-out, so this stops
	// before the agents' goroutines are awaited and the store shuts down.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.svc.Run(ctx) }()
	e.stop = func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	}
	t.Cleanup(func() {
		if e.stop != nil {
			e.stop()
		}
	})
	return e
}

// driving reports whether a driver is attached to the module.
func (e *env) driving() bool {
	e.mod.mu.RLock()
	defer e.mod.mu.RUnlock()
	return e.mod.out != nil
}

func (e *env) setLeader(v bool) {
	e.t.Helper()
	e.lead.set(v)
	eventually(e.t, 5*time.Second, func() error {
		if e.driving() != v {
			return fmt.Errorf("driver running = %v, want %v", !v, v)
		}
		return nil
	})
}

var client = router.Sender{SessionID: "s-client", ParticipantID: "client", ParticipantType: "client"}

// call invokes an extension method and decodes its result.
func (e *env) call(method string, params string) (map[string]any, *rpc.Error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.svc.Methods()[method](ctx, client, json.RawMessage(params))
	return decodeResult(e.t, res, err)
}

func decodeResult(t testing.TB, res any, err error) (map[string]any, *rpc.Error) {
	t.Helper()
	if err != nil {
		var re *rpc.Error
		if !errors.As(err, &re) {
			t.Fatalf("non-MAP error %T %v", err, err)
		}
		// Round-trip through JSON as a client would see it.
		b, _ := json.Marshal(re)
		out := &rpc.Error{}
		_ = json.Unmarshal(b, out)
		return nil, out
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

func (e *env) mustStart(request string) string {
	e.t.Helper()
	res, err := e.call(MethodStart, `{"request":`+request+`}`)
	if err != nil {
		e.t.Fatalf("start: %v %+v", err, err.Data)
	}
	if res["status"] != StatusRunning || res["runId"] == "" {
		e.t.Fatalf("start result %v", res)
	}
	return res["runId"].(string)
}

func (e *env) status(runID string) string {
	run, ok := e.mod.Get(runID, Include{})
	if !ok {
		return ""
	}
	return run.Status
}

func (e *env) waitStatus(runID, status string) {
	e.t.Helper()
	eventually(e.t, 20*time.Second, func() error {
		if got := e.status(runID); got != status {
			return fmt.Errorf("run %s status %q, want %q", runID, got, status)
		}
		return nil
	})
}

// reply answers a task as agent `as` through the reply endpoint.
func (e *env) reply(as, taskID string, payload json.RawMessage) (map[string]any, *rpc.Error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.svc.HandleSend(ctx, agentSender(as), replyParams(taskID, payload))
	return decodeResult(e.t, res, err)
}

// testSystem is the system id of the federation tests' node (remoteEnv).
const testSystem = "dc1"

// agentSender is the sender of agent id's replies: a local agent's
// session, or for a remote id "<system>:agent:<id>" what the router hands
// over for a reply that crossed a link (router.DeliverService). The test
// system's own id in that form is the local agent (the router delivers
// {system: own, agent} locally).
func agentSender(id string) router.Sender {
	if sys, local, ok := federation.ParseRemoteID(id); ok {
		if sys != testSystem {
			return router.Sender{ParticipantID: id, ParticipantType: "agent", AgentID: id, SourceSystem: sys}
		}
		id = local
	}
	return router.Sender{SessionID: "s-" + id, ParticipantID: id, ParticipantType: "agent", AgentID: id}
}

// replyParams is what AgentConnection.reply(original, payload) sends.
func replyParams(taskID string, payload json.RawMessage) json.RawMessage {
	id, _ := json.Marshal(taskID)
	return json.RawMessage(`{"to":{"agent":"` + ServiceID + `"},"payload":` + string(payload) +
		`,"meta":{"isResult":true,"correlationId":` + string(id) + `}}`)
}

// fakeLeadership is a leadership channel the test flips.
type fakeLeadership struct {
	mu   sync.Mutex
	subs []chan bool
	cur  bool
}

func (l *fakeLeadership) SubscribeLeadership() (<-chan bool, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan bool, 16)
	ch <- l.cur
	l.subs = append(l.subs, ch)
	return ch, func() {}
}

func (l *fakeLeadership) set(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = v
	for _, ch := range l.subs {
		ch <- v
	}
}

// countingProposer counts proposed RUN_INPUT kinds and passes them on.
type countingProposer struct {
	next   Proposer
	mu     sync.Mutex
	kinds  map[string]int
	bytes  int                   // encoded size of every proposed input
	inputs []*concordv1.RunInput // with keep: every proposed input
	keep   bool
	lat    time.Duration // summed propose-to-applied time
	n      int
}

func (p *countingProposer) Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error) {
	if in, ok := m.(*concordv1.RunInput); ok {
		p.mu.Lock()
		p.kinds[inputKind(in)]++
		p.bytes += proto.Size(in)
		if p.keep {
			p.inputs = append(p.inputs, in)
		}
		p.mu.Unlock()
	}
	t0 := time.Now()
	a, b, c := p.next.Apply(ctx, t, m)
	p.mu.Lock()
	p.lat += time.Since(t0)
	p.n++
	p.mu.Unlock()
	return a, b, c
}

func (p *countingProposer) count(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kinds[kind]
}

func inputKind(in *concordv1.RunInput) string {
	switch in.GetInput().(type) {
	case *concordv1.RunInput_Start:
		return "start"
	case *concordv1.RunInput_TaskResult:
		return "task_result"
	case *concordv1.RunInput_TaskFailed:
		return "task_failed"
	case *concordv1.RunInput_TimerFired:
		return "timer_fired"
	case *concordv1.RunInput_Cancel:
		return "cancel"
	case *concordv1.RunInput_Forget:
		return "forget"
	}
	return "?"
}

// Agent behaviours.
const (
	actAnswer   = iota // answer like consensus.Persona
	actSilent          // accept the message, never answer
	actRefuse          // delivery fails (agent not connected)
	actSwallow         // accepted, but lost with a dying connection
	actTooLarge        // refused for the message itself (-32602), as a federation link refuses a task over its limit
)

// fakeAgents is the Messenger: it plays every participant. A task it accepts
// is answered (per behave) from its own goroutine through HandleSend,
// like an agent replying over MAP.
type fakeAgents struct {
	t      *testing.T
	e      *env
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	behave func(task *consensus.Task, attempt int) int
	sends  map[string]int // task id -> send attempts
	notice map[string]int // task id -> cancellation notices received
	late   int            // replies refused with 90002
	errs   []error
}

func newFakeAgents(t *testing.T, e *env) *fakeAgents {
	ctx, cancel := context.WithCancel(context.Background())
	a := &fakeAgents{t: t, e: e, ctx: ctx, cancel: cancel, sends: map[string]int{}, notice: map[string]int{},
		behave: func(*consensus.Task, int) int { return actAnswer }}
	t.Cleanup(func() {
		a.cancel()
		a.wg.Wait()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, err := range a.errs {
			t.Errorf("agent: %v", err)
		}
	})
	return a
}

func (a *fakeAgents) setBehaviour(f func(task *consensus.Task, attempt int) int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.behave = f
}

func (a *fakeAgents) attempts(taskID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sends[taskID]
}

// cancelNotices returns how many cancellation notices arrived for a task.
func (a *fakeAgents) cancelNotices(taskID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.notice[taskID]
}

func (a *fakeAgents) Send(_ context.Context, from router.Sender, params json.RawMessage) (any, error) {
	if id, pid, ok := cancelNotice(params); ok {
		a.mu.Lock()
		a.notice[id]++
		a.mu.Unlock()
		return &router.SendResult{MessageID: "m", Delivered: []string{pid}}, nil
	}
	task, _, err := taskFromMessage(params)
	a.mu.Lock()
	if err == nil && (from.ParticipantID != ServiceID || from.ParticipantType != "system") {
		err = fmt.Errorf("task sent as %+v", from)
	}
	if err != nil {
		a.errs = append(a.errs, err)
		a.mu.Unlock()
		return nil, err
	}
	a.sends[task.ID]++
	act := a.behave(task, a.sends[task.ID])
	a.mu.Unlock()
	switch act {
	case actRefuse:
		return nil, rpc.NewError(rpc.CodeDeliveryFailed, "Delivery failed for every recipient")
	case actTooLarge:
		return nil, rpc.NewError(rpc.CodeInvalidParams, "message of 2000000 bytes exceeds the federation limit of 1048576")
	case actAnswer:
		a.wg.Go(func() { a.answer(task) })
	}
	return &router.SendResult{MessageID: "m", Delivered: []string{task.ParticipantID}}, nil
}

func (a *fakeAgents) answer(task *consensus.Task) {
	out, err := consensus.Persona{}.Answer(task)
	if err == nil {
		_, err = a.e.svc.HandleSend(a.ctx, agentSender(task.ParticipantID), replyParams(task.ID, out))
	}
	if rpcCode(err) == CodeTaskUnknown {
		// A reply that lost a race with the task's timer: refused, and the
		// test decides whether that may happen.
		a.mu.Lock()
		a.late++
		a.mu.Unlock()
		return
	}
	if err != nil && a.ctx.Err() == nil {
		a.mu.Lock()
		a.errs = append(a.errs, fmt.Errorf("reply to %s: %w", task.ID, err))
		a.mu.Unlock()
	}
}

func rpcCode(err error) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

func (a *fakeAgents) lateReplies() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.late
}
