package agentbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/concordmap/concord/node/client/mapclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type sent struct {
	to      string
	corr    string
	result  bool
	payload map[string]any
}

// fakeClient records what the bridge sends.
type fakeClient struct {
	mu          sync.Mutex
	sends       []sent
	registered  []string
	unregisterd []string
	loseFirst   int // fail this many sends with ErrConnectionLost
	notify      chan struct{}
}

func newFake() *fakeClient { return &fakeClient{notify: make(chan struct{}, 1000)} }

func (f *fakeClient) RegisterAgent(_ context.Context, s mapclient.AgentSpec) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered = append(f.registered, s.AgentID)
	return json.RawMessage(`{"id":"` + s.AgentID + `"}`), nil
}

func (f *fakeClient) UnregisterAgent(_ context.Context, id, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unregisterd = append(f.unregisterd, id)
	return nil
}

func (f *fakeClient) Send(_ context.Context, p mapclient.SendParams) (mapclient.SendResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loseFirst > 0 {
		f.loseFirst--
		return mapclient.SendResult{}, mapclient.ErrConnectionLost
	}
	b, _ := json.Marshal(p)
	var d struct {
		To struct {
			System string `json:"system"`
			Agent  string `json:"agent"`
		} `json:"to"`
		Meta struct {
			CorrelationID string `json:"correlationId"`
			IsResult      bool   `json:"isResult"`
		} `json:"meta"`
		Payload map[string]any `json:"payload"`
	}
	_ = json.Unmarshal(b, &d)
	to := d.To.Agent
	if d.To.System != "" {
		to = d.To.System + ":agent:" + to
	}
	f.sends = append(f.sends, sent{to: to, corr: d.Meta.CorrelationID, result: d.Meta.IsResult, payload: d.Payload})
	f.notify <- struct{}{}
	return mapclient.SendResult{MessageID: "m", Delivered: []string{"concord.runs"}}, nil
}

// waitSends waits until n replies were sent and returns them.
func (f *fakeClient) waitSends(t *testing.T, n int) []sent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		if len(f.sends) >= n {
			out := append([]sent(nil), f.sends...)
			f.mu.Unlock()
			return out
		}
		f.mu.Unlock()
		select {
		case <-f.notify:
		case <-timeout:
			t.Fatalf("timed out waiting for %d replies", n)
		}
	}
}

func (f *fakeClient) reply(corr string) (sent, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sends {
		if s.corr == corr {
			return s, true
		}
	}
	return sent{}, false
}

func taskMsg(id string, extra string) mapclient.Message {
	payload := `{"type":"x-concord.run.task","runId":"run-1","task":{"kind":"round","participantId":"p1","phase":"initial","round":0}` + extra + `}`
	return mapclient.Message{ID: "msg-" + id, From: "concord.runs", Payload: json.RawMessage(payload),
		Meta: mapclient.MessageMeta{CorrelationID: id, ExpectsResponse: true}}
}

// startBridge runs a bridge against a fake client until the test ends.
func startBridge(t *testing.T, h Handler, mod func(*Config)) (*Bridge, *fakeClient, func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.AgentID = "p1"
	cfg.Handler = h
	cfg.ReplyTimeout = 2 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, f) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.registered)
		f.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("agent never registered")
		}
		time.Sleep(time.Millisecond)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return b, f, stop
}

var echoHandler = HandlerFunc(func(_ context.Context, t *Task) (json.RawMessage, error) {
	return Envelope(t, json.RawMessage(`{"summary":"ok `+t.ID+`"}`))
})

func TestBridge_AnswersTask(t *testing.T) {
	b, f, stop := startBridge(t, echoHandler, nil)
	b.Deliver(mapclient.Message{ID: "x", Payload: json.RawMessage(`{"hello":1}`)}) // not a task: ignored
	b.Deliver(taskMsg("t1", ""))
	s := f.waitSends(t, 1)[0]
	if s.to != "concord.runs" || s.corr != "t1" || !s.result {
		t.Fatalf("reply routing %+v", s)
	}
	if s.payload["kind"] != "round" || s.payload["output"].(map[string]any)["summary"] != "ok t1" {
		t.Fatalf("payload %v", s.payload)
	}
	stop()
	if f.unregisterd[0] != "p1" {
		t.Fatalf("unregistered %v", f.unregisterd)
	}
	if st := b.Stats(); st.Handled != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBridge_ConcurrencyLimit(t *testing.T) {
	var cur, peak atomic.Int32
	release := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, t *Task) (json.RawMessage, error) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer cur.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return Envelope(t, json.RawMessage(`{}`))
	})
	b, f, _ := startBridge(t, h, func(c *Config) { c.Concurrency = 2 })
	for i := range 6 {
		b.Deliver(taskMsg(fmt.Sprint("t", i), ""))
	}
	deadline := time.Now().Add(5 * time.Second)
	for cur.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	f.waitSends(t, 6)
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrency %d, want 2", p)
	}
}

func TestBridge_OverloadRejected(t *testing.T) {
	release := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, t *Task) (json.RawMessage, error) {
		<-release
		return Envelope(t, json.RawMessage(`{}`))
	})
	b, f, _ := startBridge(t, h, func(c *Config) { c.Concurrency, c.QueueLimit = 1, 1 })
	for i := range 3 {
		b.Deliver(taskMsg(fmt.Sprint("t", i), ""))
	}
	s := f.waitSends(t, 1)[0]
	if s.corr != "t2" || s.payload["kind"] != "error" || !strings.Contains(s.payload["error"].(string), "overloaded") {
		t.Fatalf("first reply %+v, want t2 rejected", s)
	}
	close(release)
	f.waitSends(t, 3)
}

func TestBridge_Duplicates(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	h := HandlerFunc(func(ctx context.Context, t *Task) (json.RawMessage, error) {
		calls.Add(1)
		<-release
		return Envelope(t, json.RawMessage(`{"n":1}`))
	})
	b, f, _ := startBridge(t, h, nil)
	b.Deliver(taskMsg("t1", ""))
	b.Deliver(taskMsg("t1", "")) // still running: ignored
	close(release)
	f.waitSends(t, 1)
	b.Deliver(taskMsg("t1", "")) // answered: the same answer again
	all := f.waitSends(t, 2)
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	if fmt.Sprint(all[0].payload) != fmt.Sprint(all[1].payload) {
		t.Fatalf("resent %v, first %v", all[1].payload, all[0].payload)
	}
}

func TestBridge_ErrorPayloads(t *testing.T) {
	hang := HandlerFunc(func(ctx context.Context, _ *Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	})
	tests := []struct {
		name    string
		h       Handler
		msg     mapclient.Message
		errHas  string
		maxTime time.Duration
	}{
		{"deadline from the task", hang, taskMsg("t1", fmt.Sprintf(`,"timeoutAt":%d`, time.Now().Add(300*time.Millisecond).UnixMilli())), "timed out", 5 * time.Second},
		{"deadline from the flag", hang, taskMsg("t1", ""), "timed out", 5 * time.Second},
		{"handler panics", HandlerFunc(func(context.Context, *Task) (json.RawMessage, error) { panic("boom") }), taskMsg("t1", ""), "panicked: boom", time.Second},
		{"handler error", HandlerFunc(func(context.Context, *Task) (json.RawMessage, error) { return nil, errors.New("llm quota") }), taskMsg("t1", ""), "llm quota", time.Second},
		{"invalid JSON", HandlerFunc(func(context.Context, *Task) (json.RawMessage, error) { return json.RawMessage(`{`), nil }), taskMsg("t1", ""), "invalid JSON", time.Second},
		{"malformed task", echoHandler, mapclient.Message{Payload: json.RawMessage(`{"type":"x-concord.run.task","task":"nope"}`),
			Meta: mapclient.MessageMeta{CorrelationID: "t1"}}, "malformed task", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, f, _ := startBridge(t, tt.h, func(c *Config) { c.TaskTimeout = 400 * time.Millisecond })
			start := time.Now()
			b.Deliver(tt.msg)
			s := f.waitSends(t, 1)[0]
			if s.corr != "t1" || s.payload["kind"] != "error" || !strings.Contains(s.payload["error"].(string), tt.errHas) {
				t.Fatalf("reply %+v, want an error containing %q", s, tt.errHas)
			}
			if took := time.Since(start); took > tt.maxTime {
				t.Fatalf("reply after %s", took)
			}
		})
	}
}

func TestBridge_StopAnswersRunningTasks(t *testing.T) {
	hang := HandlerFunc(func(ctx context.Context, _ *Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	b, f, stop := startBridge(t, hang, nil)
	b.Deliver(taskMsg("t1", ""))
	deadline := time.Now().Add(5 * time.Second)
	for len(b.sem) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	s, ok := f.reply("t1")
	if !ok || !strings.Contains(s.payload["error"].(string), "stopping") {
		t.Fatalf("reply %+v (%v), want a stopping error", s, ok)
	}
	b.Deliver(taskMsg("t2", "")) // after stop: dropped
	if _, ok := f.reply("t2"); ok {
		t.Fatal("task answered after stop")
	}
}

func TestBridge_ReplyRetriedAfterConnectionLoss(t *testing.T) {
	b, f, _ := startBridge(t, echoHandler, nil)
	f.mu.Lock()
	f.loseFirst = 2
	f.mu.Unlock()
	b.Deliver(taskMsg("t1", ""))
	if s := f.waitSends(t, 1)[0]; s.corr != "t1" || s.payload["kind"] != "round" {
		t.Fatalf("reply %+v", s)
	}
}

func TestConfig_Validate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"no agent":       func(c *Config) { c.AgentID = "" },
		"no handler":     func(c *Config) { c.Handler = nil },
		"no concurrency": func(c *Config) { c.Concurrency = 0 },
		"negative queue": func(c *Config) { c.QueueLimit = -1 },
		"no timeout":     func(c *Config) { c.TaskTimeout = 0 },
		"no service":     func(c *Config) { c.ServiceID = "" },
	} {
		cfg := DefaultConfig()
		cfg.AgentID, cfg.Handler = "a", echoHandler
		mod(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func cancelMsg(id string) mapclient.Message {
	return mapclient.Message{ID: "cancel-" + id, From: "concord.runs",
		Payload: json.RawMessage(`{"type":"x-concord.run.task_cancelled","runId":"run-1","taskId":"` + id + `"}`),
		Meta:    mapclient.MessageMeta{CorrelationID: id}}
}

// TestBridge_TaskCancelledByRun: the notice ends the running handler's
// context, no answer is sent, a re-sent copy of the task is ignored, and a
// notice for a task not running changes nothing.
func TestBridge_TaskCancelledByRun(t *testing.T) {
	started := make(chan struct{}, 1)
	h := HandlerFunc(func(ctx context.Context, _ *Task) (json.RawMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	b, f, _ := startBridge(t, h, nil)
	b.Deliver(cancelMsg("t0")) // unknown task: nothing happens
	b.Deliver(taskMsg("t1", ""))
	<-started
	b.Deliver(cancelMsg("t1"))
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().Cancelled != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("handler not cancelled: %+v", b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	b.Deliver(taskMsg("t1", "")) // the leader re-sent it before it knew: ignored
	b.Deliver(taskMsg("t2", "")) // the bridge still serves
	<-started
	b.Deliver(cancelMsg("t2"))
	for b.Stats().Cancelled != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("second handler not cancelled: %+v", b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if _, ok := f.reply("t1"); ok {
		t.Fatal("a cancelled task was answered")
	}
	if st := b.Stats(); st.Handled != 0 || st.Failed != 0 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBridge_RepliesToTheTaskHomeSystem: a task that crossed a federation
// link (from "<system>:agent:concord.runs") is answered to that system's
// runs service ({system, agent}); any other from gets the local service.
func TestBridge_RepliesToTheTaskHomeSystem(t *testing.T) {
	b, f, _ := startBridge(t, echoHandler, nil)
	for i, tc := range []struct{ from, to string }{
		{"dc1:agent:concord.runs", "dc1:agent:concord.runs"},
		{"concord.runs", "concord.runs"},
		{"dc1:agent:mallory", "concord.runs"},
		{"bad id:agent:concord.runs", "concord.runs"},
	} {
		m := taskMsg("t-"+tc.from, "")
		m.From = tc.from
		b.Deliver(m)
		s := f.waitSends(t, i+1)[i] // one task at a time: the i-th reply is its answer
		if s.corr != m.Meta.CorrelationID || s.to != tc.to {
			t.Fatalf("task from %q answered to %q, want %q", tc.from, s.to, tc.to)
		}
	}
}
