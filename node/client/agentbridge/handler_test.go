package agentbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/concordmap/concord/consensus"
)

// engineTasks runs a persona debate in process and returns every task the
// engine dispatched (round, report and action tasks).
func engineTasks(t *testing.T) []*consensus.Task {
	t.Helper()
	req, err := consensus.ParseRequest([]byte(`{"requestId":"req-1","task":"Should we cache the index?",
		"participants":[{"id":"p1"},{"id":"p2"},{"id":"p3"}],"roundPolicy":{"minRounds":1,"maxRounds":2},
		"reportPolicy":{"composer":"representative"},"actionPolicy":{"prompt":"apply it","includeFullResult":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tasks []*consensus.Task
	rec := consensus.AgentFunc(func(ctx context.Context, task *consensus.Task) (json.RawMessage, error) {
		mu.Lock()
		tasks = append(tasks, task)
		mu.Unlock()
		return consensus.Persona{}.Answer(task)
	})
	run, err := consensus.Simulate(context.Background(), req, consensus.AgentMap{"p1": rec, "p2": rec, "p3": rec},
		consensus.SimOptions{SessionID: "s-1", StartMs: 1_700_000_000_000})
	if err != nil || run.Result == nil {
		t.Fatalf("local run: %v %+v", err, run.Failure)
	}
	return tasks
}

func wireTaskOf(t *testing.T, et *consensus.Task) *Task {
	raw, err := json.Marshal(et)
	if err != nil {
		t.Fatal(err)
	}
	return &Task{ID: et.ID, RunID: et.SessionID, Kind: et.Kind, ParticipantID: et.ParticipantID, Phase: et.Phase,
		Round: et.Round, Raw: raw}
}

// TestPersonaHandler_MatchesEngine checks that a task rebuilt from its JSON
// gets exactly the answer the in-process persona gives the original task.
func TestPersonaHandler_MatchesEngine(t *testing.T) {
	h, err := NewPersonaHandler("default")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[consensus.TaskKind]int{}
	for _, et := range engineTasks(t) {
		kinds[et.Kind]++
		want, err := consensus.Persona{}.Answer(et)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.Handle(context.Background(), wireTaskOf(t, et))
		if err != nil {
			t.Fatalf("%s: %v", et.ID, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: answer differs\n got %s\nwant %s", et.ID, got, want)
		}
	}
	if kinds[consensus.TaskRound] == 0 || kinds[consensus.TaskReport] == 0 || kinds[consensus.TaskAction] == 0 {
		t.Fatalf("task kinds covered: %v", kinds)
	}
}

func TestPersonaHandler_UnknownStyle(t *testing.T) {
	if _, err := NewPersonaHandler("grumpy"); !errors.Is(err, ErrUnknownPersona) || !strings.Contains(err.Error(), "default") {
		t.Fatalf("err = %v", err)
	}
}

func TestScriptHandler(t *testing.T) {
	s, err := consensus.LoadScript(strings.NewReader(`{"version":1,"agents":{"p1":{
		"initial":{"output":{"fullResponse":"f","summary":"scripted","judgements":[]}},
		"debate":{"error":"scripted failure"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	h := NewScriptHandler(s)
	var initial, debate *consensus.Task
	for _, et := range engineTasks(t) {
		if et.ParticipantID != "p1" || et.Kind != consensus.TaskRound {
			continue
		}
		switch {
		case et.Phase == consensus.PhaseInitial && initial == nil:
			initial = et
		case et.Phase == consensus.PhaseDebate && debate == nil:
			debate = et
		}
	}
	got, err := h.Handle(context.Background(), wireTaskOf(t, initial))
	if err != nil || !strings.Contains(string(got), `"summary":"scripted"`) || !strings.HasPrefix(string(got), `{"kind":"round"`) {
		t.Fatalf("initial: %s, %v", got, err)
	}
	if _, err := h.Handle(context.Background(), wireTaskOf(t, debate)); err == nil || !strings.Contains(err.Error(), "scripted failure") {
		t.Fatalf("debate: %v", err)
	}
	p2 := wireTaskOf(t, initial)
	p2.Raw = bytes.Replace(p2.Raw, []byte(`"participantId":"p1"`), []byte(`"participantId":"p9"`), 1)
	if _, err := h.Handle(context.Background(), p2); err == nil {
		t.Fatal("answer for a participant the script does not know")
	}
}

func TestEnvelope(t *testing.T) {
	task := &Task{Kind: consensus.TaskReport}
	tests := []struct{ in, want, errHas string }{
		{`{"mode":"builtin"}`, `{"kind":"report","output":{"mode":"builtin"}}`, ""},
		{`{"kind":"report","output":{"x":1}}`, `{"kind":"report","output":{"x":1}}`, ""},
		{`{"kind":"round","output":{}}`, "", "answer kind"},
		{`{"kind":"error","error":"nope"}`, "", "nope"},
		{`[1]`, "", "not a JSON object"},
	}
	for _, tt := range tests {
		got, err := Envelope(task, json.RawMessage(tt.in))
		if tt.errHas != "" {
			if !errors.Is(err, ErrBadAnswer) || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("%s: err %v", tt.in, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: got %s, %v", tt.in, got, err)
		}
	}
}
