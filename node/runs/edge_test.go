package runs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/concordmap/concord/consensus"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// A round reply is parsed at the edge: the log carries its binary form,
// not the agent's JSON, and a reply that fails the schema is committed the
// same way and eliminates its participant with the engine's usual message.
func TestService_RoundRepliesCarryParsedResults(t *testing.T) {
	e := newEnv(t)
	e.props.keep = true
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	id := e.mustStart(request3)
	tasks := e.outstandingOf(id)
	good, err := consensus.Persona{}.Answer(tasks["p1"])
	if err != nil {
		t.Fatal(err)
	}
	bad := json.RawMessage(`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[]}}`)
	for _, r := range []struct {
		pid     string
		payload json.RawMessage
	}{{"p1", good}, {"p2", bad}} {
		if _, rerr := e.reply(r.pid, tasks[r.pid].ID, r.payload); rerr != nil {
			t.Fatalf("%s: reply refused: %v", r.pid, rerr)
		}
	}
	for _, in := range e.props.inputs {
		if res := in.GetTaskResult(); res != nil && (len(res.GetRoundResult()) == 0 || len(res.GetOutputJson()) != 0) {
			t.Fatalf("round reply committed without its parsed form: %d bytes of JSON", len(res.GetOutputJson()))
		}
	}
	run, _ := e.mod.Get(id, Include{Events: true})
	if len(run.Eliminations) != 1 || run.Eliminations[0].ParticipantID != "p2" {
		t.Fatalf("eliminations %+v", run.Eliminations)
	}
	want := "invalid_round_result: output.taskTitle is required"
	found := false
	for _, ev := range run.Events {
		found = found || strings.Contains(string(ev), want)
	}
	if !found {
		t.Fatalf("no elimination event with %q", want)
	}
}

// A round_result whose bytes are not a RoundResult is refused by Apply on
// every replica alike, changing nothing.
func TestModule_CorruptRoundResultRefused(t *testing.T) {
	r := newReplica(t)
	if _, err := r.apply(startInput(t, runA, t0, request3)); err != nil {
		t.Fatal(err)
	}
	task := r.outstanding(runA)[0]
	before := dump(t, r.mod, r.reg)
	in := &concordv1.RunInput{RunId: runA, TimeMs: t0 + 1, Input: &concordv1.RunInput_TaskResult{
		TaskResult: &concordv1.RunTaskResult{TaskId: task.ID, ParticipantId: task.ParticipantID, RoundResult: []byte{9, 9}}}}
	if _, err := r.apply(in); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("corrupt round_result: %v", err)
	}
	if dump(t, r.mod, r.reg) != before {
		t.Fatal("a refused input changed the replica")
	}
}
