package runs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const t0 = int64(1_750_000_000_000)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// replica is one module with its own registry, fed by hand like the FSM.
type replica struct {
	t     testing.TB
	mod   *Module
	reg   *registry.State
	index uint64
}

func newReplica(t testing.TB) *replica {
	t.Helper()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Events = reg
	mod, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{t: t, mod: mod, reg: reg}
}

// apply runs one RUN_INPUT through the handler after a proto round trip,
// as it would arrive from the Raft log.
func (r *replica) apply(in *concordv1.RunInput) (any, error) {
	r.t.Helper()
	b, err := proto.Marshal(in)
	if err != nil {
		r.t.Fatal(err)
	}
	h := r.mod.Handlers()[concordv1.CommandType_COMMAND_TYPE_RUN_INPUT]
	m := h.New()
	if err := proto.Unmarshal(b, m); err != nil {
		r.t.Fatal(err)
	}
	r.index++
	return h.Apply(r.index, m)
}

// outstanding returns the engine's outstanding tasks of a run.
func (r *replica) outstanding(runID string) []*consensus.Task {
	r.mod.mu.Lock()
	defer r.mod.mu.Unlock()
	return r.mod.runs[runID].st.OutstandingTasks()
}

// timers returns a copy of a run's pending timers.
func (r *replica) timers(runID string) map[string]timerEntry {
	r.mod.mu.RLock()
	defer r.mod.mu.RUnlock()
	out := map[string]timerEntry{}
	for k, v := range r.mod.runs[runID].timers {
		out[k] = v
	}
	return out
}

// dump renders everything observable about a module and its registry
// events, for equality between replicas.
func dump(t testing.TB, mod *Module, reg *registry.State) string {
	t.Helper()
	var b bytes.Buffer
	mod.mu.RLock()
	ids := append([]string(nil), mod.ids...)
	for _, id := range ids {
		fmt.Fprintf(&b, "run %s state %x\n", id, consensus.EncodeState(mod.runs[id].st))
	}
	mod.mu.RUnlock()
	for _, id := range ids {
		run, _ := mod.Get(id, Include{Result: true, Events: true, State: true})
		j, err := json.Marshal(run)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "get %s\n", j)
	}
	list, _ := mod.List("", "", 1000)
	j, _ := json.Marshal(list)
	fmt.Fprintf(&b, "list %s\n", j)
	for _, rec := range snapshotRecords(t, mod) {
		fmt.Fprintf(&b, "snap %x\n", rec)
	}
	if reg != nil {
		for _, ev := range reg.EventsAfter(0, 0) {
			fmt.Fprintf(&b, "event %d %s %s %d %s %v %s\n", ev.Position, ev.ID, ev.Type, ev.Timestamp, ev.Source, ev.AgentIDs, ev.Data)
		}
	}
	return b.String()
}

func snapshotRecords(t testing.TB, mod *Module) [][]byte {
	t.Helper()
	snap, err := mod.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var recs [][]byte
	if err := snap.Persist(func(b []byte) error {
		recs = append(recs, append([]byte(nil), b...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

func records(recs [][]byte) func() ([]byte, error) {
	i := 0
	return func() ([]byte, error) {
		if i >= len(recs) {
			return nil, io.EOF
		}
		i++
		return recs[i-1], nil
	}
}

// Input builders.

func startInput(t testing.TB, runID string, at int64, request string) *concordv1.RunInput {
	t.Helper()
	req, err := consensus.ParseRequest([]byte(request))
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: "n1", Source: "client",
		Input: &concordv1.RunInput_Start{Start: &concordv1.RunStart{RequestJson: body}}}
}

func resultInput(runID string, at int64, taskID, pid string, out json.RawMessage) *concordv1.RunInput {
	return &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: "n1", Source: pid,
		Input: &concordv1.RunInput_TaskResult{TaskResult: &concordv1.RunTaskResult{TaskId: taskID, ParticipantId: pid, OutputJson: out}}}
}

func failedInputAt(runID string, at int64, taskID, pid, kind, reason string) *concordv1.RunInput {
	return &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: "n1", Source: pid,
		Input: &concordv1.RunInput_TaskFailed{TaskFailed: &concordv1.RunTaskFailed{TaskId: taskID, ParticipantId: pid, Kind: kind, Reason: reason}}}
}

func timerInput(runID string, at int64, timerID string) *concordv1.RunInput {
	return &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: "n1",
		Input: &concordv1.RunInput_TimerFired{TimerFired: &concordv1.RunTimerFired{TimerId: timerID, AtMs: at}}}
}

func cancelInput(runID string, at int64, reason string) *concordv1.RunInput {
	return &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: "n1", Source: "client",
		Input: &concordv1.RunInput_Cancel{Cancel: &concordv1.RunCancel{Reason: reason}}}
}

// persona answers a task like consensus.Persona.
func persona(t testing.TB, task *consensus.Task) json.RawMessage {
	t.Helper()
	out, err := consensus.Persona{}.Answer(task)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// request3 is a small request: three persona participants, a representative
// report and an action, short timeouts.
const request3 = `{"requestId":"req-1","task":"Should we adopt a four-day work week?",
 "participants":[{"id":"p1"},{"id":"p2"},{"id":"p3"}],
 "roundPolicy":{"minRounds":1,"maxRounds":2},
 "reportPolicy":{"composer":"representative"},
 "actionPolicy":{"prompt":"Write the memo."},
 "waitingPolicy":{"perTaskTimeoutMs":5000,"perRoundTimeoutMs":60000}}`

// testClock is the wall clock shifted by an offset the test can advance,
// so timers come due without sleeping.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// eventually polls cond until it returns nil or d passes.
func eventually(t testing.TB, d time.Duration, cond func() error) {
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
		time.Sleep(10 * time.Millisecond)
	}
}

// agentSet is a fake AgentReader: every listed id is a registered agent
// owned by session "s-<id>".
type agentSet map[string]bool

func (a agentSet) Agent(id string) (registry.Agent, bool) {
	if !a[id] {
		return registry.Agent{}, false
	}
	return registry.Agent{ID: id, OwnerID: id, SessionID: "s-" + id, State: registry.StateActive}, true
}

// taskFromMessage rebuilds the task an agent received from the map/send
// params of a task message, the way a real agent sees it: payload.task
// (argue's task JSON) and meta.correlationId (the task id).
// cancelNotice reads a task cancellation notice: the task id, the agent
// it is for, and whether params is one.
func cancelNotice(params json.RawMessage) (taskID, pid string, ok bool) {
	var msg struct {
		To      taskAddress `json:"to"`
		Payload struct {
			Type   string `json:"type"`
			RunID  string `json:"runId"`
			TaskID string `json:"taskId"`
		} `json:"payload"`
		Meta struct {
			CorrelationID   string `json:"correlationId"`
			ExpectsResponse bool   `json:"expectsResponse"`
		} `json:"meta"`
	}
	if json.Unmarshal(params, &msg) != nil || msg.Payload.Type != TaskCancelledType {
		return "", "", false
	}
	p := msg.Payload
	if p.TaskID == "" || msg.Meta.CorrelationID != p.TaskID || msg.Meta.ExpectsResponse || !strings.HasPrefix(p.TaskID, p.RunID+"/") {
		return "", "", false
	}
	return p.TaskID, msg.To.participant(), true
}

// taskAddress is the to of a task message: {agent} for a local
// participant, {system, agent} for one of another system.
type taskAddress struct {
	System string `json:"system"`
	Agent  string `json:"agent"`
}

// participant is the participant id the address reaches.
func (a taskAddress) participant() string {
	if a.System != "" {
		return federation.RemoteID(a.System, a.Agent)
	}
	return a.Agent
}

func taskFromMessage(params json.RawMessage) (*consensus.Task, string, error) {
	var msg struct {
		To      taskAddress `json:"to"`
		Payload struct {
			Type      string `json:"type"`
			RunID     string `json:"runId"`
			TimeoutAt int64  `json:"timeoutAt"`
			Task      struct {
				Kind          consensus.TaskKind           `json:"kind"`
				SessionID     string                       `json:"sessionId"`
				RequestID     string                       `json:"requestId"`
				ParticipantID string                       `json:"participantId"`
				Phase         consensus.Phase              `json:"phase"`
				Round         int                          `json:"round"`
				Prompt        string                       `json:"prompt"`
				ClaimCatalog  []consensus.Claim            `json:"claimCatalog"`
				ReportInput   *consensus.ReportInput       `json:"reportInput"`
				ArgueResult   *consensus.ActionArgueResult `json:"argueResult"`
				Peers         []consensus.PeerInput        `json:"peerRoundInputs"`
			} `json:"task"`
		} `json:"payload"`
		Meta struct {
			ExpectsResponse bool   `json:"expectsResponse"`
			CorrelationID   string `json:"correlationId"`
			Timestamp       int64  `json:"timestamp"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(params, &msg); err != nil {
		return nil, "", err
	}
	p := msg.Payload
	if p.Type != TaskMessageType || !msg.Meta.ExpectsResponse || msg.Meta.CorrelationID == "" || msg.Meta.Timestamp == 0 ||
		p.TimeoutAt <= 0 {
		return nil, "", fmt.Errorf("bad task message %s", params)
	}
	if msg.To.participant() != p.Task.ParticipantID || !strings.Contains(p.Task.SessionID, p.RunID) ||
		!strings.HasPrefix(msg.Meta.CorrelationID, p.RunID+"/") {
		return nil, "", fmt.Errorf("task message routed wrong: %s", params)
	}
	return &consensus.Task{ID: msg.Meta.CorrelationID, TimeoutAt: p.TimeoutAt, Kind: p.Task.Kind, ParticipantID: p.Task.ParticipantID,
		SessionID: p.Task.SessionID, RequestID: p.Task.RequestID, Phase: p.Task.Phase, Round: p.Task.Round,
		Prompt: p.Task.Prompt, ClaimCatalog: p.Task.ClaimCatalog, ReportInput: p.Task.ReportInput,
		ArgueResult: p.Task.ArgueResult, PeerRoundInputs: p.Task.Peers}, p.RunID, nil
}

// runLocal runs the same request with persona agents in process.
func runLocal(t testing.TB, runID, request string) *consensus.Outcome {
	t.Helper()
	req, err := consensus.ParseRequest([]byte(request))
	if err != nil {
		t.Fatal(err)
	}
	run, err := consensus.Simulate(context.Background(), req, &consensus.Script{Version: 1, Persona: true},
		consensus.SimOptions{SessionID: runID, StartMs: t0})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// timingFree removes the fields that depend on when things happened.
func timingFree(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	var strip func(any) any
	strip = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range []string{"respondedAt", "at", "elapsedMs"} {
				delete(v, k)
			}
			for k, e := range v {
				v[k] = strip(e)
			}
		case []any:
			for i, e := range v {
				v[i] = strip(e)
			}
		}
		return v
	}
	out, _ := json.Marshal(strip(x))
	return string(out)
}

func protoMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func protoUnmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
