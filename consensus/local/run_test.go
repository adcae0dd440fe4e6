package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/consensus/local"
)

func threeReq(t *testing.T, extra string) *consensus.Request {
	t.Helper()
	r, err := consensus.ParseRequest([]byte(`{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"},{"id":"c"}]` + extra + `}`))
	if err != nil {
		t.Fatalf("ParseRequest: %v", err)
	}
	return r
}

func TestRun_WallClock(t *testing.T) {
	req := threeReq(t, `,"waitingPolicy":{"perTaskTimeoutMs":1000,"perRoundTimeoutMs":1500},"actionPolicy":{"prompt":"go"}`)
	slow := consensus.AgentFunc(func(ctx context.Context, task *consensus.Task) (json.RawMessage, error) {
		if task.Kind == consensus.TaskRound && task.Round == 1 {
			<-ctx.Done() // never answers round 1: the engine's per-task timer must fire
			return nil, ctx.Err()
		}
		return consensus.Persona{}.Answer(task)
	})
	agents := consensus.AgentMap{"a": consensus.Persona{}.Agent(), "b": consensus.Persona{}.Agent(), "c": slow}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := local.Run(ctx, req, agents, local.Options{Clock: local.WallClock{}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if run.Result == nil || len(run.Result.Eliminations) != 1 || run.Result.Eliminations[0].Reason != consensus.ReasonTimeout {
		t.Fatalf("result = %+v failure = %+v", run.Result, run.Failure)
	}
	if run.Result.Action == nil || run.Result.Action.Status != "completed" {
		t.Errorf("action = %+v", run.Result.Action)
	}
}

func TestRun_WallClockMissingAgentFailsRun(t *testing.T) {
	agents := consensus.AgentMap{"a": consensus.Persona{}.Agent()}
	run, err := local.Run(context.Background(), threeReq(t, ""), agents, local.Options{Clock: local.WallClock{}})
	if err != nil || run.Failure == nil || !strings.Contains(run.Failure.Message, "no agent") {
		t.Fatalf("run = %+v, err = %v", run, err)
	}
}

func TestRun_ContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	block := consensus.AgentFunc(func(ctx context.Context, _ *consensus.Task) (json.RawMessage, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	agents := consensus.AgentMap{"a": block, "b": block, "c": block}
	run, err := local.Run(ctx, threeReq(t, ""), agents, local.Options{Clock: local.WallClock{}})
	if !errors.Is(err, context.Canceled) || run == nil || run.Failure == nil || run.Failure.Code != "Cancelled" {
		t.Fatalf("run = %+v, err = %v", run, err)
	}
}

// Without a clock Run is Simulate: same outcome, byte for byte.
func TestRun_VirtualIsSimulate(t *testing.T) {
	script := &consensus.Script{Version: 1, Persona: true}
	got, err := local.Run(context.Background(), threeReq(t, ""), script, local.Options{SessionID: "s", StartMs: 7})
	if err != nil {
		t.Fatal(err)
	}
	want, err := consensus.Simulate(context.Background(), threeReq(t, ""), script, consensus.SimOptions{SessionID: "s", StartMs: 7})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got.Result)
	w, _ := json.Marshal(want.Result)
	if string(g) != string(w) || len(got.Inputs) != len(want.Inputs) {
		t.Fatalf("Run and Simulate differ:\n%s\n%s", g, w)
	}
}

func TestWriteArtifacts(t *testing.T) {
	script := &consensus.Script{Version: 1, Persona: true}
	run, err := local.Run(context.Background(), threeReq(t, ""), script, local.Options{})
	if err != nil || run.Result == nil {
		t.Fatalf("run = %+v, err = %v", run, err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := local.WriteArtifacts(dir, run.Result, nil, run.Events); err != nil {
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
	fdir := t.TempDir()
	if err := local.WriteArtifacts(fdir, nil, &consensus.Failure{Code: "Cancelled", Message: "stop"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(fdir, "result.json")); !os.IsNotExist(err) {
		t.Errorf("failed run wrote result.json: %v", err)
	}
	sum, _ := os.ReadFile(filepath.Join(fdir, "summary.md"))
	if !strings.Contains(string(sum), "Cancelled") {
		t.Errorf("summary.md = %q", sum)
	}
}
