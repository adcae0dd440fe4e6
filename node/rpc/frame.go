package rpc

import "unicode/utf8"

// frame decoding: one inbound WebSocket message or NDJSON line holds either
// one JSON-RPC object or a batch (array) of them.

// decodedFrame is the result of decodeFrame.
type decodedFrame struct {
	batch bool
	msgs  []message      // valid elements, in order, for a single object: len 1
	errs  []*decodeError // errs[i] != nil when element i is not a valid message
	fatal *decodeError   // the whole frame failed (parse error, empty batch)
}

// decodeFrame decodes data once. For a batch, the array is validated as a
// whole first: JSON-RPC answers a syntactically broken batch with a single
// parse error, not with per-element errors.
func decodeFrame(data []byte, maxBatch int) decodedFrame {
	if !utf8.Valid(data) {
		// A text frame must be UTF-8 (RFC 6455); forwarding invalid bytes
		// would make a browser peer fail its connection.
		return decodedFrame{fatal: &decodeError{code: CodeParseError, reason: "invalid UTF-8"}}
	}
	i := skipSpace(data, 0)
	if i < len(data) && data[i] == '[' {
		return decodeBatch(data, i, maxBatch)
	}
	m, derr := decodeObject(data)
	if derr != nil && derr.code == CodeParseError {
		return decodedFrame{fatal: derr}
	}
	return decodedFrame{msgs: []message{m}, errs: []*decodeError{derr}}
}

func decodeBatch(data []byte, start, maxBatch int) decodedFrame {
	end, err := scanValue(data, start, 0)
	if err == nil && skipSpace(data, end) != len(data) {
		err = errTrailing
	}
	if err != nil {
		return decodedFrame{fatal: &decodeError{code: CodeParseError, reason: err.Error()}}
	}
	var spans [][2]int
	i := skipSpace(data, start+1)
	for data[i] != ']' {
		e, _ := scanValue(data, i, 1) // already validated above
		spans = append(spans, [2]int{i, e})
		if len(spans) > maxBatch {
			return decodedFrame{fatal: &decodeError{code: CodeInvalidRequest, reason: "batch too large"}}
		}
		i = skipSpace(data, e)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	if len(spans) == 0 {
		return decodedFrame{fatal: &decodeError{code: CodeInvalidRequest, reason: "empty batch"}}
	}
	f := decodedFrame{batch: true, msgs: make([]message, len(spans)), errs: make([]*decodeError, len(spans))}
	for k, sp := range spans {
		f.msgs[k], f.errs[k] = decodeObject(data[sp[0]:sp[1]])
	}
	return f
}
