package runs

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/rpc"
)

// maxReasonLen bounds a cancel reason (bytes); it is stored in the run.
const maxReasonLen = 4096

// startParams is x-concord/runs/start: {request}.
func decodeStart(raw json.RawMessage) (json.RawMessage, error) {
	m, err := rpc.ParseParams(raw)
	if err != nil {
		return nil, err
	}
	req, ok := m["request"]
	if !ok {
		return nil, rpc.InvalidParams("request", "required")
	}
	if req[0] != '{' {
		return nil, rpc.InvalidParams("request", "must be an object")
	}
	return req, nil
}

// decodeGet is x-concord/runs/get: {runId, include?}.
func decodeGet(raw json.RawMessage) (string, Include, error) {
	m, err := rpc.ParseParams(raw)
	if err != nil {
		return "", Include{}, err
	}
	id, err := m.RequiredString("runId")
	if err != nil {
		return "", Include{}, err
	}
	var inc Include
	if v, ok := m["include"]; ok {
		var list []string
		if v[0] != '[' || json.Unmarshal(v, &list) != nil {
			return "", Include{}, rpc.InvalidParams("include", "must be an array of strings")
		}
		for i, s := range list {
			switch s {
			case "result":
				inc.Result = true
			case "events":
				inc.Events = true
			case "state":
				inc.State = true
			default:
				return "", Include{}, rpc.InvalidParams("include["+strconv.Itoa(i)+"]", "must be one of result, events, state")
			}
		}
	}
	return id, inc, nil
}

// listParams is x-concord/runs/list: {status?, limit?, cursor?}.
type listParams struct {
	status string
	limit  int
	cursor string
}

var statuses = []string{StatusRunning, StatusFinished, StatusFailed, StatusCancelled}

func decodeList(raw json.RawMessage, defLimit, maxLimit int) (listParams, error) {
	m, err := rpc.ParseParams(raw)
	if err != nil {
		return listParams{}, err
	}
	p := listParams{limit: defLimit}
	if p.status, err = m.String("status"); err != nil {
		return listParams{}, err
	}
	if p.status != "" && !slices.Contains(statuses, p.status) {
		return listParams{}, rpc.InvalidParams("status", "must be one of running, finished, failed, cancelled")
	}
	if v, ok := m["limit"]; ok {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 1 || n > int64(maxLimit) {
			return listParams{}, rpc.InvalidParams("limit", "must be an integer from 1 to "+strconv.Itoa(maxLimit))
		}
		p.limit = int(n)
	}
	if p.cursor, err = m.String("cursor"); err != nil {
		return listParams{}, err
	}
	return p, nil
}

// decodeCancel is x-concord/runs/cancel: {runId, reason?}.
func decodeCancel(raw json.RawMessage) (id, reason string, err error) {
	m, err := rpc.ParseParams(raw)
	if err != nil {
		return "", "", err
	}
	if id, err = m.RequiredString("runId"); err != nil {
		return "", "", err
	}
	if reason, err = m.String("reason"); err != nil {
		return "", "", err
	}
	if len(reason) > maxReasonLen {
		return "", "", rpc.InvalidParams("reason", "longer than "+strconv.Itoa(maxReasonLen)+" bytes")
	}
	return id, reason, nil
}

// reply is a map/send to the service: an agent's answer to a task.
type reply struct {
	taskID  string
	payload json.RawMessage
	// failed is set when the payload is an error answer
	// {"kind":"error","error":"..."}; errMsg is its text.
	failed bool
	errMsg string
}

// decodeReply decodes {to, payload, meta:{correlationId, isResult?}}.
// Only the top level and meta are decoded: the payload, which may be large,
// is kept as raw bytes for the engine (jsonkit.Members only finds where
// each top-level value ends; the engine validates the payload in Apply).
func decodeReply(raw json.RawMessage) (reply, error) {
	var r reply
	var metaRaw []byte
	err := jsonkit.Members(raw, func(key string, val []byte) error {
		switch key {
		case "payload":
			r.payload = val
		case "meta":
			metaRaw = val
		}
		return nil
	})
	if err != nil {
		return reply{}, rpc.InvalidParams("params", "must be an object")
	}
	if len(r.payload) == 0 || string(r.payload) == "null" {
		return reply{}, rpc.InvalidParams("payload", "required: the task result {kind, output}")
	}
	payload := r.payload
	if len(metaRaw) == 0 || string(metaRaw) == "null" {
		return reply{}, rpc.InvalidParams("meta.correlationId", "required: the task id")
	}
	// What decoding meta into a map accepted (valid JSON, an object, the
	// last of repeated keys wins), without building the map: every reply
	// passes here.
	var cid, isResult []byte
	if !json.Valid(metaRaw) || jsonkit.Members(metaRaw, func(key string, val []byte) error {
		switch key {
		case "correlationId":
			cid = val
		case "isResult":
			isResult = val
		}
		return nil
	}) != nil {
		return reply{}, rpc.InvalidParams("meta", "must be an object")
	}
	if cid == nil || cid[0] != '"' || json.Unmarshal(cid, &r.taskID) != nil || r.taskID == "" {
		return reply{}, rpc.InvalidParams("meta.correlationId", "required: the task id")
	}
	if isResult != nil && string(isResult) != "true" && string(isResult) != "false" {
		return reply{}, rpc.InvalidParams("meta.isResult", "must be a boolean")
	}
	// Only an error answer needs decoding here; skip the scan of large
	// results that cannot be one.
	if payload[0] == '{' && bytes.Contains(payload, []byte(`"error"`)) {
		var e struct {
			Kind  string          `json:"kind"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(payload, &e) == nil && e.Kind == "error" {
			r.failed = true
			if json.Unmarshal(e.Error, &r.errMsg) != nil {
				r.errMsg = string(e.Error)
			}
			if r.errMsg == "" {
				r.errMsg = "agent reported an error"
			}
			r.errMsg = truncate(r.errMsg, maxReasonLen)
		}
	}
	return r, nil
}

// runOfTask returns the run id of a task id `<runId>/...`.
func runOfTask(taskID string) string {
	if i := strings.IndexByte(taskID, '/'); i > 0 {
		return taskID[:i]
	}
	return taskID
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
