package agentbridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/rpc"
)

// taskPayload is the payload of a task message.
type taskPayload struct {
	Type  string          `json:"type"`
	RunID string          `json:"runId"`
	Task  json.RawMessage `json:"task"`
	// TimeoutAt, when present, is the engine's deadline for the task (ms
	// since the epoch, node/runs PROTOCOL.md); the bridge stops at the
	// earlier of it and Config.TaskTimeout.
	TimeoutAt int64 `json:"timeoutAt"`
}

// parseCancel reads a task cancellation notice: the task id, or false when
// msg is not one.
func parseCancel(msg mapclient.Message) (string, bool) {
	var p struct {
		Type   string `json:"type"`
		TaskID string `json:"taskId"`
	}
	if len(msg.Payload) == 0 || json.Unmarshal(msg.Payload, &p) != nil || p.Type != TaskCancelledType || p.TaskID == "" {
		return "", false
	}
	return p.TaskID, true
}

// parseTask reads a task message. It returns nil when msg is not a run
// task, and a task with an error when it is one that cannot be used (the
// bridge answers it with an error payload).
func parseTask(msg mapclient.Message) (*Task, error) {
	var p taskPayload
	if len(msg.Payload) == 0 || json.Unmarshal(msg.Payload, &p) != nil || p.Type != TaskMessageType {
		return nil, nil
	}
	t := &Task{ID: msg.Meta.CorrelationID, RunID: p.RunID, Raw: p.Task}
	if t.ID == "" {
		return nil, nil // nothing to correlate a reply with
	}
	if p.TimeoutAt > 0 {
		t.Deadline = time.UnixMilli(p.TimeoutAt)
	}
	var head taskHead
	if len(p.Task) == 0 || json.Unmarshal(p.Task, &head) != nil {
		return t, fmt.Errorf("%w: task is not a JSON object", ErrBadTask)
	}
	t.Kind, t.ParticipantID, t.Phase, t.Round = head.Kind, head.ParticipantID, head.Phase, head.Round
	if t.Kind == "" {
		return t, fmt.Errorf("%w: task has no kind", ErrBadTask)
	}
	return t, nil
}

// errorPayload is the answer to a task that failed: the runs service turns
// it into a task_failed input.
func (b *Bridge) errorPayload(err error) map[string]any {
	msg := err.Error()
	if len(msg) > b.cfg.MaxErrorBytes {
		cut := b.cfg.MaxErrorBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return map[string]any{"kind": "error", "error": msg}
}

// retryable reports whether the server marked the refusal retryable (no
// leader, rate limited).
func retryable(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Data != nil && re.Data.Retryable
}
