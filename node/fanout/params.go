package fanout

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/concordmap/concord/node/rpc"
)

// paramObject splits a params object into raw members. Absent or null
// params read as an empty object.
func paramObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	obj := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return obj, nil
	}
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return nil, rpc.InvalidParams("params", "must be an object")
	}
	for k, v := range obj {
		if string(v) == "null" {
			delete(obj, k)
		}
	}
	return obj, nil
}

func stringParam(obj map[string]json.RawMessage, key string, required bool) (string, error) {
	v, ok := obj[key]
	if !ok {
		if required {
			return "", rpc.InvalidParams(key, "required")
		}
		return "", nil
	}
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil || s == "" {
		return "", rpc.InvalidParams(key, "must be a non-empty string")
	}
	return s, nil
}

// intParam reads a non-negative integer; ok is false when absent.
func intParam(obj map[string]json.RawMessage, key string) (n int64, ok bool, err error) {
	v, ok := obj[key]
	if !ok {
		return 0, false, nil
	}
	n, perr := strconv.ParseInt(string(v), 10, 64)
	if perr != nil || n < 0 {
		return 0, false, rpc.InvalidParams(key, "must be a non-negative integer")
	}
	return n, true, nil
}

// options are the SDK's SubscriptionOptions the hub applies; other keys
// (bufferSize, ordering, ...) are accepted and ignored.
type options struct {
	IncludeMessagePayloads bool `json:"includeMessagePayloads"`
	ExcludeOwnEvents       bool `json:"excludeOwnEvents"`
}

func parseOptions(raw json.RawMessage) (options, error) {
	var o options
	if len(raw) == 0 || string(raw) == "null" {
		return o, nil
	}
	var obj map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return o, rpc.InvalidParams("options", "must be an object")
	}
	for key, dst := range map[string]*bool{"includeMessagePayloads": &o.IncludeMessagePayloads, "excludeOwnEvents": &o.ExcludeOwnEvents} {
		switch v := string(obj[key]); v {
		case "", "null", "false":
		case "true":
			*dst = true
		default:
			return o, rpc.InvalidParams("options."+key, "must be a boolean")
		}
	}
	return o, nil
}

// startKind says where a subscription's delivery starts.
type startKind int

const (
	startNow       startKind = iota // live only
	startAfterID                    // after an event id (exclusive)
	startTimestamp                  // at the first event with timestamp >= ts
)

type startSpec struct {
	kind    startKind
	field   string // the param that set it, for errors
	eventID string
	ts      int64
}

// subscribeSpec is map/subscribe's params after validation.
type subscribeSpec struct {
	filter     *filter
	rawFilter  []byte // persisted as sent (nil when absent)
	rawOptions []byte
	opts       options
	start      startSpec
}

// parseSubscribe validates {filter?, options?, replayFrom? (int ms or
// eventId), fromEventId? (alias), fromTimestamp? (alias of an int replayFrom)}.
func parseSubscribe(raw json.RawMessage) (*subscribeSpec, error) {
	obj, err := paramObject(raw)
	if err != nil {
		return nil, err
	}
	sp := &subscribeSpec{}
	if sp.filter, err = parseFilter(obj["filter"]); err != nil {
		return nil, err
	}
	if sp.opts, err = parseOptions(obj["options"]); err != nil {
		return nil, err
	}
	sp.rawFilter = bytes.Clone(obj["filter"])
	sp.rawOptions = bytes.Clone(obj["options"])
	sp.start, err = parseStart(obj)
	return sp, err
}

func parseStart(obj map[string]json.RawMessage) (startSpec, error) {
	var given []string
	for _, k := range []string{"replayFrom", "fromEventId", "fromTimestamp"} {
		if _, ok := obj[k]; ok {
			given = append(given, k)
		}
	}
	if len(given) > 1 {
		return startSpec{}, rpc.InvalidParams(given[1], "give only one of replayFrom, fromEventId, fromTimestamp")
	}
	if len(given) == 0 {
		return startSpec{kind: startNow}, nil
	}
	key := given[0]
	if v := obj[key]; key == "fromEventId" || (key == "replayFrom" && v[0] == '"') {
		id, err := stringParam(obj, key, true)
		return startSpec{kind: startAfterID, field: key, eventID: id}, err
	}
	ts, _, err := intParam(obj, key)
	if err != nil {
		return startSpec{}, rpc.InvalidParams(key, "must be an event id or a timestamp in ms")
	}
	return startSpec{kind: startTimestamp, field: key, ts: ts}, nil
}
