package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/rpc"
)

// sendParams is map/send's params after decoding. Raw fields hold the
// client's bytes (copied out of the frame by encoding/json) and are written
// into the Message unchanged.
type sendParams struct {
	to      json.RawMessage // the Address, never nil
	payload json.RawMessage // nil when absent
	meta    json.RawMessage // nil when absent or null
	info    metaInfo
}

// metaInfo is what the router itself reads from MessageMeta (for events).
type metaInfo struct {
	correlationID string
	priority      string
	hasTimestamp  bool
	hasFrom       bool // the client set meta.from: the router replaces it
}

var (
	priorities    = []string{"urgent", "high", "normal", "low"}
	deliveries    = []string{"fire-and-forget", "acknowledged", "guaranteed"}
	relationships = []string{"parent-to-child", "child-to-parent", "peer", "broadcast"}
)

// decodeSendParams decodes {to*, payload?, meta?}. Every failure is a -32602
// *rpc.Error naming the field. Unknown members (from, _meta, ...) are ignored.
// The raw slices alias params, which the rpc layer gives each request to keep.
func decodeSendParams(params json.RawMessage) (sendParams, error) {
	params = bytes.TrimSpace(params)
	if len(params) == 0 || isNull(params) {
		return sendParams{}, rpc.InvalidParams("to", "required")
	}
	if params[0] != '{' {
		return sendParams{}, rpc.InvalidParams("params", "must be an object")
	}
	var p sendParams
	err := jsonkit.Members(params, func(k string, v []byte) error {
		switch k {
		case "to":
			p.to = v
		case "payload":
			p.payload = v
		case "meta":
			p.meta = v
		}
		return nil
	})
	if err != nil {
		return sendParams{}, rpc.InvalidParams("params", "must be a JSON object")
	}
	if len(p.to) == 0 || isNull(p.to) {
		return sendParams{}, rpc.InvalidParams("to", "required")
	}
	if len(p.meta) == 0 || isNull(p.meta) {
		p.meta = nil
		return p, nil
	}
	if p.info, err = decodeMeta(p.meta); err != nil {
		return sendParams{}, err
	}
	if p.info.hasFrom {
		p.meta = withoutMember(p.meta, "from")
	}
	return p, nil
}

// withoutMember returns a copy of the object obj without its key members.
// Only the rare send whose meta carries "from" pays for it.
func withoutMember(obj json.RawMessage, key string) json.RawMessage {
	out := append(make([]byte, 0, len(obj)), '{')
	_ = jsonkit.Members(obj, func(k string, v []byte) error {
		if k == key {
			return nil
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = jsonkit.AppendString(out, k)
		out = append(out, ':')
		out = append(out, v...)
		return nil
	})
	return append(out, '}')
}

// decodeMeta checks the MessageMeta fields whose types the schema fixes and
// reads the ones the router needs. Unknown keys (mail, protocol, _meta,
// vendor keys) pass through untouched; a null value reads as absent, except
// for timestamp, which the router would otherwise have to replace.
func decodeMeta(meta json.RawMessage) (metaInfo, error) {
	if meta[0] != '{' {
		return metaInfo{}, rpc.InvalidParams("meta", "must be an object")
	}
	var info metaInfo
	err := jsonkit.Members(meta, func(k string, v []byte) error {
		if k == "from" {
			info.hasFrom = true // whatever its value: the sender is who the server says
			return nil
		}
		if k == "timestamp" {
			info.hasTimestamp = true
			if _, err := strconv.ParseInt(string(v), 10, 64); err != nil {
				return rpc.InvalidParams("meta.timestamp", "must be an integer (ms since the epoch)")
			}
			return nil
		}
		if isNull(v) {
			return nil
		}
		switch k {
		case "correlationId":
			s, ok := jsonkit.Unquote(v)
			if !ok {
				return rpc.InvalidParams("meta.correlationId", "must be a string")
			}
			info.correlationID = s
		case "priority":
			s, ok := jsonkit.Unquote(v)
			if !ok || !oneOf(s, priorities) {
				return rpc.InvalidParams("meta.priority", "must be one of urgent, high, normal, low")
			}
			info.priority = s
		case "delivery":
			if s, ok := jsonkit.Unquote(v); !ok || !oneOf(s, deliveries) {
				return rpc.InvalidParams("meta.delivery", "must be one of fire-and-forget, acknowledged, guaranteed")
			}
		case "relationship":
			if s, ok := jsonkit.Unquote(v); !ok || !oneOf(s, relationships) {
				return rpc.InvalidParams("meta.relationship", "must be one of parent-to-child, child-to-parent, peer, broadcast")
			}
		case "expectsResponse", "isResult":
			if string(v) != "true" && string(v) != "false" {
				return rpc.InvalidParams("meta."+k, "must be a boolean")
			}
		case "ttlMs":
			if n, err := strconv.ParseInt(string(v), 10, 64); err != nil || n < 0 {
				return rpc.InvalidParams("meta.ttlMs", "must be a non-negative integer")
			}
		}
		return nil
	})
	var re *rpc.Error
	if errors.As(err, &re) {
		return metaInfo{}, re
	}
	if err != nil {
		return metaInfo{}, rpc.InvalidParams("meta", "malformed")
	}
	return info, nil
}

// appendMeta appends the message's meta: the client's object byte for byte,
// with "timestamp" inserted as the first key when the client did not set it.
// setFrom (non-empty when the client sent a meta.from, which decoding
// removed) is inserted as "from": clients never choose who a message is
// from.
func appendMeta(b []byte, meta json.RawMessage, hasTimestamp bool, ts int64, setFrom string) []byte {
	if setFrom != "" {
		b = append(b, `{"from":`...)
		b = jsonkit.AppendString(b, setFrom)
		rest := bytes.TrimSpace(meta[1:]) // meta is an object here: hasFrom implies it
		if !hasTimestamp {
			b = append(b, `,"timestamp":`...)
			b = strconv.AppendInt(b, ts, 10)
		}
		if len(rest) > 0 && rest[0] != '}' {
			b = append(b, ',')
		}
		return append(b, rest...)
	}
	if len(meta) == 0 {
		b = append(b, `{"timestamp":`...)
		b = strconv.AppendInt(b, ts, 10)
		return append(b, '}')
	}
	if hasTimestamp {
		return append(b, meta...)
	}
	b = append(b, `{"timestamp":`...)
	b = strconv.AppendInt(b, ts, 10)
	rest := bytes.TrimSpace(meta[1:]) // after '{'
	if len(rest) > 0 && rest[0] != '}' {
		b = append(b, ',')
	}
	return append(b, rest...)
}

func isNull(b []byte) bool { return string(b) == "null" }

func oneOf(s string, set []string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}
