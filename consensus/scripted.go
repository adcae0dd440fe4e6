package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Answer is one scripted reply. Exactly one of Output, Raw, Error or
// Timeout should be set.
type Answer struct {
	// Output is the output content; the agent adds participantId, phase and
	// round (round tasks) and wraps it as {"kind": <task kind>, "output": ...}.
	Output json.RawMessage `json:"output,omitempty"`
	// Raw is sent as the result verbatim; a JSON string is sent as its
	// contents, so a script can send malformed JSON.
	Raw json.RawMessage `json:"raw,omitempty"`
	// Error makes the task fail with this message.
	Error string `json:"error,omitempty"`
	// Timeout makes the agent never answer.
	Timeout bool `json:"timeout,omitempty"`
	// LatencyMs is the simulated answer time under the virtual clock.
	LatencyMs int64 `json:"latencyMs,omitempty"`
}

// Script is a deterministic set of scripted agents, usually loaded from an
// answers file:
//
//	{"version":1, "persona":true, "agents":{"p1":{"initial":{...}, "debate:1":{...},
//	 "debate":{...}, "final_vote":{...}, "report":{...}, "action":{...}}}}
//
// A round task looks up "<phase>:<round>" then "<phase>"; report and action
// tasks look up "report" and "action". Without an answer the Persona (when
// enabled) makes one up; otherwise the task fails with ErrNoAnswer. A Script
// is read-only after loading and safe for concurrent use.
type Script struct {
	Version int                          `json:"version"`
	Agents  map[string]map[string]Answer `json:"agents"`
	// Persona enables the persona generator for every participant.
	Persona bool `json:"persona,omitempty"`
}

// LoadScript reads an answers file.
func LoadScript(r io.Reader) (*Script, error) {
	var s Script
	dec := json.NewDecoder(io.LimitReader(r, 64<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAnswers, err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("%w: version %d (want 1)", ErrInvalidAnswers, s.Version)
	}
	return &s, nil
}

// Agent implements Directory.
func (s *Script) Agent(id string) (Agent, bool) {
	if _, ok := s.Agents[id]; !ok && !s.Persona {
		return nil, false
	}
	return &scriptedAgent{script: s, id: id}, true
}

type scriptedAgent struct {
	script *Script
	id     string
}

func (a *scriptedAgent) lookup(t *Task) (Answer, bool) {
	answers := a.script.Agents[a.id]
	if t.Kind == TaskRound {
		if ans, ok := answers[string(t.Phase)+":"+strconv.Itoa(t.Round)]; ok {
			return ans, true
		}
		ans, ok := answers[string(t.Phase)]
		return ans, ok
	}
	ans, ok := answers[string(t.Kind)]
	return ans, ok
}

// LatencyMs implements Latency.
func (a *scriptedAgent) LatencyMs(t *Task) int64 {
	ans, ok := a.lookup(t)
	if !ok {
		return 0
	}
	if ans.Timeout {
		return -1
	}
	return ans.LatencyMs
}

// Handle implements Agent.
func (a *scriptedAgent) Handle(ctx context.Context, t *Task) (json.RawMessage, error) {
	ans, ok := a.lookup(t)
	if !ok {
		if a.script.Persona {
			return Persona{}.Answer(t)
		}
		return nil, fmt.Errorf("%w for %s (%s)", ErrNoAnswer, a.id, t.ID)
	}
	switch {
	case ans.Timeout:
		<-ctx.Done() // wall-clock driver: wait until the engine gives up
		return nil, ctx.Err()
	case ans.Error != "":
		return nil, errors.New(ans.Error)
	case len(ans.Raw) > 0:
		var s string
		if json.Unmarshal(ans.Raw, &s) == nil {
			return json.RawMessage(s), nil
		}
		return ans.Raw, nil
	case len(ans.Output) > 0:
		return wrapOutput(t, ans.Output)
	}
	return nil, fmt.Errorf("%w: empty answer for %s (%s)", ErrInvalidAnswers, a.id, t.ID)
}

// wrapOutput adds the routing fields to output content and wraps it in the
// result envelope of the task's kind.
func wrapOutput(t *Task, content json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteString(`{"kind":`)
	k, _ := json.Marshal(string(t.Kind))
	b.Write(k)
	b.WriteString(`,"output":`)
	if t.Kind != TaskRound {
		b.Write(content)
		b.WriteString("}")
		return b.Bytes(), nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(content, &fields); err != nil {
		return nil, fmt.Errorf("%w: output of %s is not an object: %w", ErrInvalidAnswers, t.ID, err)
	}
	if _, ok := fields["participantId"]; !ok {
		fields["participantId"], _ = json.Marshal(t.ParticipantID)
	}
	if _, ok := fields["phase"]; !ok {
		fields["phase"], _ = json.Marshal(string(t.Phase))
	}
	if _, ok := fields["round"]; !ok {
		fields["round"], _ = json.Marshal(t.Round)
	}
	out, err := json.Marshal(fields) // sorted keys: deterministic bytes
	if err != nil {
		return nil, err
	}
	b.Write(out)
	b.WriteString("}")
	return b.Bytes(), nil
}
