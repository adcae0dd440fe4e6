package rpc

import "unicode/utf8"

// frame decoding: one inbound WebSocket message or NDJSON line holds either
// one JSON-RPC object or a batch (array) of them.

// decodedFrame is the result of decodeFrame.
type decodedFrame struct {
	batch bool
	one   message        // the message of a non-batch frame
	oneE  *decodeError   // why one is not a valid message
	msgs  []message      // batch elements, in order
	errs  []*decodeError // errs[i] != nil when batch element i is not a valid message
	fatal *decodeError   // the whole frame failed (parse error, empty batch)
}

// at returns element i (a non-batch frame has exactly one).
func (f *decodedFrame) at(i int) (message, *decodeError) {
	if !f.batch {
		return f.one, f.oneE
	}
	return f.msgs[i], f.errs[i]
}

// len returns the number of messages in the frame.
func (f *decodedFrame) len() int {
	if !f.batch {
		return 1
	}
	return len(f.msgs)
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
	return decodedFrame{one: m, oneE: derr}
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
