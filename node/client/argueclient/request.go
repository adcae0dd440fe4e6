package argueclient

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/consensus"
)

// RequestSpec is what `concord argue run` says about the request. Input is
// a start request file (argue's JSON shape); every other field overrides
// it when set (nil or empty = not given on the command line).
type RequestSpec struct {
	Input     string // path of a JSON request; "-" is not supported (stdin is the terminal)
	RequestID string
	Task      string
	Agents    []string

	MinRounds        *int64
	MaxRounds        *int64
	Threshold        *float64
	Composer         string
	Representative   string
	Action           string
	PerTaskTimeout   *time.Duration
	PerRoundTimeout  *time.Duration
	GlobalDeadline   *time.Duration
	IncludeFullInAct bool
}

// Build merges the spec into a start request object. It fills requestId
// with a fresh "req-<ULID>" when neither the input nor the flags give one,
// and validates the result with consensus.ParseRequest, so a bad request
// fails here with every field error rather than on the server.
func (s RequestSpec) Build() (json.RawMessage, *consensus.Request, error) {
	obj := map[string]any{}
	if s.Input != "" {
		raw, err := os.ReadFile(s.Input)
		if err != nil {
			return nil, nil, fmt.Errorf("read --input: %w", err)
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, nil, fmt.Errorf("%w: --input %s is not a JSON object: %w", ErrInvalidRequest, s.Input, err)
		}
	}
	set := func(block, key string, v any) {
		b, ok := obj[block].(map[string]any)
		if !ok {
			b = map[string]any{}
			obj[block] = b
		}
		b[key] = v
	}
	if s.RequestID != "" {
		obj["requestId"] = s.RequestID
	}
	if id, _ := obj["requestId"].(string); id == "" {
		obj["requestId"] = "req-" + strings.ToLower(ulid.Make().String())
	}
	if s.Task != "" {
		obj["task"] = s.Task
	}
	if len(s.Agents) > 0 {
		ps := make([]any, len(s.Agents))
		for i, a := range s.Agents {
			ps[i] = map[string]any{"id": a}
		}
		obj["participants"] = ps
	}
	if s.MinRounds != nil {
		set("roundPolicy", "minRounds", *s.MinRounds)
	}
	if s.MaxRounds != nil {
		set("roundPolicy", "maxRounds", *s.MaxRounds)
	}
	if s.Threshold != nil {
		set("consensusPolicy", "threshold", *s.Threshold)
	}
	if s.Composer != "" {
		set("reportPolicy", "composer", s.Composer)
	}
	if s.Representative != "" {
		set("reportPolicy", "representativeId", s.Representative)
	}
	if s.Action != "" {
		set("actionPolicy", "prompt", s.Action)
		if s.IncludeFullInAct {
			set("actionPolicy", "includeFullResult", true)
		}
	}
	if s.PerTaskTimeout != nil {
		set("waitingPolicy", "perTaskTimeoutMs", s.PerTaskTimeout.Milliseconds())
	}
	if s.PerRoundTimeout != nil {
		set("waitingPolicy", "perRoundTimeoutMs", s.PerRoundTimeout.Milliseconds())
	}
	if s.GlobalDeadline != nil {
		set("waitingPolicy", "globalDeadlineMs", s.GlobalDeadline.Milliseconds())
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	req, err := consensus.ParseRequest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return raw, req, nil
}
