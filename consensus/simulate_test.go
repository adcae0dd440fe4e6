package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSimulate_MissingAgentFailsRun(t *testing.T) {
	run, err := Simulate(context.Background(), threeReq(t, ""), AgentMap{"a": Persona{}.Agent()}, SimOptions{})
	if err != nil || run.Failure == nil || !strings.Contains(run.Failure.Message, "no agent") {
		t.Fatalf("run = %+v, err = %v", run, err)
	}
}

func TestSimulate_InvalidRequest(t *testing.T) {
	r := threeReq(t, "")
	r.RoundPolicy.MaxRounds = 0
	if _, err := Simulate(context.Background(), r, AgentMap{}, SimOptions{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("err = %v", err)
	}
}

func TestScript_Load(t *testing.T) {
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
