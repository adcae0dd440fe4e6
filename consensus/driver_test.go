package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunLocal_WallClock(t *testing.T) {
	req := threeReq(t, `,"waitingPolicy":{"perTaskTimeoutMs":1000,"perRoundTimeoutMs":1500},"actionPolicy":{"prompt":"go"}`)
	slow := AgentFunc(func(ctx context.Context, task *Task) (json.RawMessage, error) {
		if task.Kind == TaskRound && task.Round == 1 {
			<-ctx.Done() // never answers round 1: the engine's per-task timer must fire
			return nil, ctx.Err()
		}
		return Persona{}.Answer(task)
	})
	agents := AgentMap{"a": Persona{}.Agent(), "b": Persona{}.Agent(), "c": slow}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := RunLocal(ctx, req, agents, LocalOptions{Clock: WallClock{}})
	if err != nil {
		t.Fatalf("RunLocal: %v", err)
	}
	if run.Result == nil || len(run.Result.Eliminations) != 1 || run.Result.Eliminations[0].Reason != ReasonTimeout {
		t.Fatalf("result = %+v failure = %+v", run.Result, run.Failure)
	}
	if run.Result.Action == nil || run.Result.Action.Status != "completed" {
		t.Errorf("action = %+v", run.Result.Action)
	}
}

func TestRunLocal_ContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	block := AgentFunc(func(ctx context.Context, _ *Task) (json.RawMessage, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	run, err := RunLocal(ctx, threeReq(t, ""), AgentMap{"a": block, "b": block, "c": block}, LocalOptions{Clock: WallClock{}})
	if !errors.Is(err, context.Canceled) || run == nil || run.Failure == nil || run.Failure.Code != "Cancelled" {
		t.Fatalf("run = %+v, err = %v", run, err)
	}
}

func TestRunLocal_MissingAgentFailsRun(t *testing.T) {
	run, err := RunLocal(context.Background(), threeReq(t, ""), AgentMap{"a": Persona{}.Agent()}, LocalOptions{})
	if err != nil || run.Failure == nil || !strings.Contains(run.Failure.Message, "no agent") {
		t.Fatalf("run = %+v, err = %v", run, err)
	}
}

func TestRunLocal_InvalidRequest(t *testing.T) {
	r := threeReq(t, "")
	r.RoundPolicy.MaxRounds = 0
	if _, err := RunLocal(context.Background(), r, AgentMap{}, LocalOptions{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("err = %v", err)
	}
}

func TestScript_LoadAndArtifacts(t *testing.T) {
	const answers = `{"version":1,"persona":true,"agents":{"b":{"debate:1":{"error":"model overloaded"},
	 "initial":{"latencyMs":250,"output":{"fullResponse":"B","summary":"b","taskTitle":"From b","judgements":[]}}}}}`
	s, err := LoadScript(strings.NewReader(answers))
	if err != nil {
		t.Fatal(err)
	}
	run := runScript(t, threeReq(t, ""), s)
	if run.Result == nil || len(run.Result.Eliminations) != 1 || run.Result.Eliminations[0].ParticipantID != "b" {
		t.Fatalf("result = %+v", run.Result)
	}
	dir := t.TempDir()
	if err := WriteArtifacts(dir, run.Result, nil, run.Events); err != nil {
		t.Fatal(err)
	}
	lines, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	n := strings.Count(string(lines), "\n")
	if n != len(run.Events) || !strings.HasPrefix(string(lines), `{"v":1,"kind":"argue.event","seq":0,`) {
		t.Errorf("events.jsonl has %d lines for %d events", n, len(run.Events))
	}
	for _, f := range []string{"result.json", "summary.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{`{"version":2}`, `{"version":1,"agentz":{}}`, `nope`} {
		if _, err := LoadScript(strings.NewReader(bad)); !errors.Is(err, ErrInvalidAnswers) {
			t.Errorf("LoadScript(%s) = %v", bad, err)
		}
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.n++
	if w.n == 2 {
		return 0, fmt.Errorf("disk full")
	}
	return len(p), nil
}

func TestEventLog_SeqConsumedByFailedWrite(t *testing.T) {
	var w failingWriter
	l := NewEventLogWriter(&w)
	ev := Event{Type: EventFinalized, At: "x"}
	if l.Write(ev) != nil || l.Write(ev) == nil || l.Write(ev) != nil || l.seq != 3 {
		t.Fatalf("seq = %d", l.seq)
	}
}
