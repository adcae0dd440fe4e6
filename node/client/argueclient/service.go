package argueclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/runs"
)

// Method names and wire facts of the runs extension (node/runs/PROTOCOL.md).
const (
	MethodStart  = "x-concord/runs/start"
	MethodGet    = "x-concord/runs/get"
	MethodList   = "x-concord/runs/list"
	MethodCancel = "x-concord/runs/cancel"
	// EventTypePrefix prefixes the MAP event type of every run event.
	EventTypePrefix = "x-concord.run."
	// CodeRunNotFound, CodeRunFinished and CodeTaskUnknown are the
	// extension's error codes.
	CodeRunNotFound = 90000
	CodeRunFinished = 90001
	CodeTaskUnknown = 90002
)

// Caller is what the runs client needs from a MAP connection
// (*mapclient.Client satisfies it).
type Caller interface {
	Call(ctx context.Context, method string, params any) (json.RawMessage, error)
	CallRetry(ctx context.Context, method string, params any) (json.RawMessage, error)
}

// Summary is a run as list, get and cancel show it: the server's own wire
// type (node/runs, PROTOCOL.md), so client and server cannot drift apart.
type Summary = runs.Summary

// RunInfo is get's run: the summary plus the parts include asked for.
// Result and Events are kept as the server's bytes.
type RunInfo struct {
	Summary
	Result json.RawMessage   `json:"result,omitempty"`
	Events []json.RawMessage `json:"events,omitempty"`
	// Raw is the whole run object.
	Raw json.RawMessage `json:"-"`
}

// StartResult is start's answer.
type StartResult struct {
	RunID     string `json:"runId"`
	RequestID string `json:"requestId"`
	Status    string `json:"status"`
}

// Runs calls the runs extension.
type Runs struct{ C Caller }

// Start starts a run. start is not idempotent, so a call cut by a
// connection loss is not simply repeated: the runs the server knows are
// searched for the request id first (a run started by the lost call is
// adopted), and only if there is none is the start sent again.
func (r Runs) Start(ctx context.Context, request json.RawMessage, requestID string) (StartResult, error) {
	var res StartResult
	since := time.Now().Add(-time.Minute).UnixMilli() // tolerate some clock skew between us and the server
	for attempt := 0; ; attempt++ {
		raw, err := r.C.Call(ctx, MethodStart, map[string]any{"request": request})
		if err == nil {
			if uerr := json.Unmarshal(raw, &res); uerr != nil || res.RunID == "" {
				return res, fmt.Errorf("%w: start result %.200s", ErrBadResponse, raw)
			}
			return res, nil
		}
		if !errors.Is(err, mapclient.ErrConnectionLost) || attempt == 3 {
			return res, err
		}
		runs, _, lerr := r.List(ctx, "", 100, "")
		if lerr != nil {
			return res, errors.Join(err, lerr)
		}
		for _, s := range runs {
			if s.RequestID == requestID && s.StartedAt >= since {
				return StartResult{RunID: s.RunID, RequestID: s.RequestID, Status: s.Status}, nil
			}
		}
	}
}

// Get reads a run; include lists "result", "events", "state".
func (r Runs) Get(ctx context.Context, runID string, include ...string) (*RunInfo, error) {
	params := map[string]any{"runId": runID}
	if len(include) > 0 {
		params["include"] = include
	}
	raw, err := r.C.CallRetry(ctx, MethodGet, params)
	if err != nil {
		return nil, err
	}
	var res struct {
		Run json.RawMessage `json:"run"`
	}
	var info RunInfo
	if json.Unmarshal(raw, &res) != nil || json.Unmarshal(res.Run, &info) != nil || info.RunID == "" {
		return nil, fmt.Errorf("%w: get result %.200s", ErrBadResponse, raw)
	}
	info.Raw = res.Run
	return &info, nil
}

// List returns one page of runs (newest first) and the cursor of the next.
func (r Runs) List(ctx context.Context, status string, limit int, cursor string) ([]Summary, string, error) {
	params := map[string]any{}
	if status != "" {
		params["status"] = status
	}
	if limit > 0 {
		params["limit"] = limit
	}
	if cursor != "" {
		params["cursor"] = cursor
	}
	raw, err := r.C.CallRetry(ctx, MethodList, params)
	if err != nil {
		return nil, "", err
	}
	var res struct {
		Runs       []Summary `json:"runs"`
		NextCursor string    `json:"nextCursor"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, "", fmt.Errorf("%w: list result: %w", ErrBadResponse, err)
	}
	return res.Runs, res.NextCursor, nil
}

// Cancel cancels a running run and returns its summary.
func (r Runs) Cancel(ctx context.Context, runID, reason string) (*Summary, error) {
	params := map[string]any{"runId": runID}
	if reason != "" {
		params["reason"] = reason
	}
	raw, err := r.C.Call(ctx, MethodCancel, params)
	if err != nil {
		return nil, err
	}
	var res struct {
		Run Summary `json:"run"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.Run.RunID == "" {
		return nil, fmt.Errorf("%w: cancel result %.200s", ErrBadResponse, raw)
	}
	return &res.Run, nil
}

// engineEvents decodes get's engine events ({sessionId, requestId, type,
// at, payload}); an event's Seq is its index.
func engineEvents(raws []json.RawMessage) ([]consensus.Event, error) {
	out := make([]consensus.Event, len(raws))
	for i, raw := range raws {
		var e struct {
			SessionID string          `json:"sessionId"`
			RequestID string          `json:"requestId"`
			Type      string          `json:"type"`
			At        string          `json:"at"`
			Payload   json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%w: event %d: %w", ErrBadResponse, i, err)
		}
		out[i] = consensus.Event{Seq: int64(i), SessionID: e.SessionID, RequestID: e.RequestID, Type: e.Type, At: e.At}
		if len(e.Payload) > 0 {
			out[i].Payload = e.Payload
		}
	}
	return out, nil
}

// mapRunEvent decodes a run's MAP event (type x-concord.run.<Type>, data
// {runId, requestId, seq, at, payload}); ok is false for anything else.
func mapRunEvent(ev mapclient.Event) (consensus.Event, bool) {
	if len(ev.Type) <= len(EventTypePrefix) || ev.Type[:len(EventTypePrefix)] != EventTypePrefix {
		return consensus.Event{}, false
	}
	var d struct {
		RunID     string          `json:"runId"`
		RequestID string          `json:"requestId"`
		Seq       *int64          `json:"seq"`
		At        string          `json:"at"`
		Payload   json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(ev.Data, &d) != nil || d.RunID == "" || d.Seq == nil {
		return consensus.Event{}, false
	}
	out := consensus.Event{Seq: *d.Seq, SessionID: d.RunID, RequestID: d.RequestID,
		Type: ev.Type[len(EventTypePrefix):], At: d.At}
	if len(d.Payload) > 0 && string(d.Payload) != "null" {
		out.Payload = d.Payload
	}
	return out, true
}
