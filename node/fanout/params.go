package fanout

import (
	"bytes"
	"encoding/json"

	"github.com/concordmap/concord/node/rpc"
)

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
	obj, err := rpc.ParseParams(raw)
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

func parseStart(obj rpc.Params) (startSpec, error) {
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
		id, err := obj.RequiredString(key)
		return startSpec{kind: startAfterID, field: key, eventID: id}, err
	}
	ts, _, err := obj.Int(key)
	if err != nil {
		return startSpec{}, rpc.InvalidParams(key, "must be an event id or a timestamp in ms")
	}
	return startSpec{kind: startTimestamp, field: key, ts: ts}, nil
}
