package agentbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/consensus/local"
)

// Handler answers one task with a result envelope {kind, output}, or an
// error that the bridge sends back as an error payload. ctx carries the
// task's deadline. Handle is called from several goroutines at once.
type Handler interface {
	Handle(ctx context.Context, t *Task) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task) (json.RawMessage, error)

// Handle implements Handler.
func (f HandlerFunc) Handle(ctx context.Context, t *Task) (json.RawMessage, error) { return f(ctx, t) }

// personaStyles are the persona generators the consensus package offers.
// It has one (consensus.Persona); the flag takes a style name so that more
// can be added without changing the CLI.
var personaStyles = map[string]func() consensus.Agent{
	"default": func() consensus.Agent { return consensus.Persona{}.Agent() },
}

// PersonaStyles lists the accepted persona style names.
func PersonaStyles() []string {
	names := make([]string, 0, len(personaStyles))
	for n := range personaStyles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewPersonaHandler answers every task with the consensus persona of the
// given style (deterministic made-up answers; no LLM needed).
func NewPersonaHandler(style string) (Handler, error) {
	mk, ok := personaStyles[style]
	if !ok {
		return nil, fmt.Errorf("%w %q (available: %s)", ErrUnknownPersona, style, strings.Join(PersonaStyles(), ", "))
	}
	agent := mk()
	return EngineAgentHandler(func(string) (consensus.Agent, bool) { return agent, true }), nil
}

// NewScriptHandler answers tasks from a consensus answers file (see
// consensus.Script): the answer of the task's participant.
func NewScriptHandler(s *consensus.Script) Handler {
	return EngineAgentHandler(s.Agent)
}

// LoadScriptHandler reads the answers file at path (see consensus.Script)
// and answers from it, like NewScriptHandler.
func LoadScriptHandler(path string) (Handler, error) {
	s, err := local.LoadScriptFile(path)
	if err != nil {
		return nil, err
	}
	return NewScriptHandler(s), nil
}

// EngineAgentHandler adapts in-process consensus agents: the task JSON is
// decoded back into a consensus.Task and given to the participant's agent.
func EngineAgentHandler(agentFor func(participantID string) (consensus.Agent, bool)) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) (json.RawMessage, error) {
		et, err := t.EngineTask()
		if err != nil {
			return nil, err
		}
		a, ok := agentFor(et.ParticipantID)
		if !ok {
			return nil, fmt.Errorf("%w: no scripted agent for participant %q", ErrBadAnswer, et.ParticipantID)
		}
		out, err := a.Handle(ctx, et)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
			}
			return nil, err
		}
		return Envelope(t, out)
	})
}
