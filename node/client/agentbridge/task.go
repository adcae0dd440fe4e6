package agentbridge

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/concordmap/concord/consensus"
)

// Task is one task received from the runs service.
type Task struct {
	// ID is the engine task id (the message's correlationId).
	ID    string
	RunID string
	Kind  consensus.TaskKind
	// ParticipantID, Phase and Round are read from the task JSON.
	ParticipantID string
	Phase         consensus.Phase
	Round         int
	// Raw is the engine task JSON exactly as received; exec'd commands get
	// it on stdin.
	Raw json.RawMessage
	// Deadline is when the engine stops waiting, from the message (zero
	// when it carried none).
	Deadline time.Time
	// homeSystem is the system whose runs service sent the task when it
	// is not the agent's own (the message came from
	// "<system>:agent:<service>"): the answer goes back over the link.
	homeSystem string
}

// taskHead is the part of the engine task JSON the bridge reads itself.
type taskHead struct {
	Kind          consensus.TaskKind `json:"kind"`
	ParticipantID string             `json:"participantId"`
	Phase         consensus.Phase    `json:"phase"`
	Round         int                `json:"round"`
}

// wireTask mirrors consensus.Task's JSON (its MarshalJSON shapes) so that
// an engine task can be rebuilt for the in-process personas and scripts.
type wireTask struct {
	Kind            consensus.TaskKind           `json:"kind"`
	SessionID       string                       `json:"sessionId"`
	RequestID       string                       `json:"requestId"`
	ParticipantID   string                       `json:"participantId"`
	Phase           consensus.Phase              `json:"phase"`
	Round           int                          `json:"round"`
	Prompt          string                       `json:"prompt"`
	PeerRoundInputs []consensus.PeerInput        `json:"peerRoundInputs"`
	ClaimCatalog    []consensus.Claim            `json:"claimCatalog"`
	Metadata        json.RawMessage              `json:"metadata"`
	ReportInput     *consensus.ReportInput       `json:"reportInput"`
	ArgueResult     *consensus.ActionArgueResult `json:"argueResult"`
	FullResult      *consensus.Result            `json:"fullResult"`
}

// EngineTask rebuilds the consensus.Task the JSON was rendered from.
func (t *Task) EngineTask() (*consensus.Task, error) {
	var w wireTask
	if err := json.Unmarshal(t.Raw, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTask, err)
	}
	et := &consensus.Task{ID: t.ID, Kind: w.Kind, ParticipantID: w.ParticipantID, Phase: w.Phase, Round: w.Round,
		SessionID: w.SessionID, RequestID: w.RequestID, Prompt: w.Prompt, PeerRoundInputs: w.PeerRoundInputs,
		ClaimCatalog: w.ClaimCatalog, ReportInput: w.ReportInput, ArgueResult: w.ArgueResult, FullResult: w.FullResult}
	if !t.Deadline.IsZero() {
		et.TimeoutAt = t.Deadline.UnixMilli()
	}
	if len(w.Metadata) > 0 && string(w.Metadata) != "null" {
		var err error
		switch w.Kind {
		case consensus.TaskRound:
			et.RoundMetadata = new(consensus.RoundMetadata)
			err = json.Unmarshal(w.Metadata, et.RoundMetadata)
		case consensus.TaskReport:
			et.ReportMetadata = new(consensus.ReportMetadata)
			err = json.Unmarshal(w.Metadata, et.ReportMetadata)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: metadata: %w", ErrBadTask, err)
		}
	}
	switch {
	case et.Kind == consensus.TaskReport && et.ReportInput == nil:
		return nil, fmt.Errorf("%w: report task without reportInput", ErrBadTask)
	case et.Kind == consensus.TaskAction && et.ArgueResult == nil:
		return nil, fmt.Errorf("%w: action task without argueResult", ErrBadTask)
	}
	return et, nil
}

// Envelope builds the result envelope {kind, output} from a handler's JSON
// answer. An answer that already is an envelope ({"kind", "output"}) is
// kept as is when its kind is the task's; {"kind":"error","error":...} is
// turned into an error; any other object is taken as the output content
// and wrapped.
func Envelope(t *Task, answer json.RawMessage) (json.RawMessage, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(answer, &probe); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %w", ErrBadAnswer, err)
	}
	rawKind, hasKind := probe["kind"]
	_, hasOutput := probe["output"]
	var kind string
	if hasKind {
		_ = json.Unmarshal(rawKind, &kind)
	}
	switch {
	case kind == "error":
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(answer, &e)
		return nil, fmt.Errorf("%w: the agent answered an error: %s", ErrBadAnswer, e.Error)
	case hasKind && hasOutput && kind != string(t.Kind):
		return nil, fmt.Errorf("%w: answer kind %q, task kind %q", ErrBadAnswer, kind, t.Kind)
	case hasKind && hasOutput:
		return answer, nil
	}
	env, err := json.Marshal(struct {
		Kind   consensus.TaskKind `json:"kind"`
		Output json.RawMessage    `json:"output"`
	}{t.Kind, answer})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	return env, nil
}
