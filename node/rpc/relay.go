package rpc

import (
	"encoding/json"
	"errors"
	"io"
)

// The exported framing below is for relays outside this package (the stdio
// bridge in node/client/stdio): they forward frames between two peers
// without serving MAP, but must read and answer them exactly as a node does.

// LineReader reads NDJSON messages (one per line), as the stdio transport
// does. It is not safe for concurrent use.
type LineReader struct{ st *streamTransport }

// NewLineReader reads from r; a line longer than maxBytes is skipped and
// reported as an error for which TooLargeResponse returns the answer.
func NewLineReader(r io.Reader, maxBytes int64) *LineReader {
	return &LineReader{st: newStreamTransport(kindStdio, "stdin", r, io.Discard, maxBytes)}
}

// Next returns the next non-blank line without its terminator (a copy).
// io.EOF ends the stream; after a too-large line, Next may be called again.
func (l *LineReader) Next() ([]byte, error) { return l.st.readMessage() }

// TooLargeResponse returns the node's answer to a line LineReader refused
// as too large (-32600 "Message too large", echoing the id when the line's
// start holds one) and true; for any other error it returns false.
func TooLargeResponse(err error) ([]byte, bool) {
	var tl *tooLargeError
	if !errors.As(err, &tl) {
		return nil, false
	}
	e := NewError(CodeInvalidRequest, "Message too large").WithDetails(map[string]any{"limit": tl.limit})
	return ErrorResponse(idFromPrefix(tl.prefix), e), true
}

// ParseErrorResponse returns the node's answer to a frame that is not JSON
// (or not UTF-8) at all, and true; for a parsable frame it returns false.
func ParseErrorResponse(frame []byte) ([]byte, bool) {
	df := decodeFrame(frame, maxRelayBatch)
	if df.fatal == nil || df.fatal.code != CodeParseError {
		return nil, false
	}
	return ErrorResponse(nil, df.fatal.rpcError()), true
}

// ErrorResponse encodes a response carrying e; a nil id encodes as null.
func ErrorResponse(id json.RawMessage, e *Error) []byte {
	b, _ := appendResponse(nil, id, nil, e) // an *Error always encodes
	return b
}

// NotificationFrame encodes a notification of method with params.
func NotificationFrame(method string, params any) ([]byte, error) {
	f := getFrame()
	defer putFrame(f)
	if err := encodeCall(f, nil, method, params); err != nil {
		return nil, err
	}
	return append([]byte(nil), f.b...), nil
}

// RequestFrame encodes a request with a raw JSON id and params.
func RequestFrame(id json.RawMessage, method string, params json.RawMessage) []byte {
	f := getFrame()
	defer putFrame(f)
	encodeRequest(f, id, method, params)
	return append([]byte(nil), f.b...)
}

// Envelope is one well-formed message of a frame, as a relay sees it. Its
// raw fields alias the frame's bytes.
type Envelope struct {
	// ID is the raw JSON id; nil for a notification.
	ID json.RawMessage
	// Method is set for requests and notifications (unescaped).
	Method string
	// Params of a request; Result and Error (the error object) of a response.
	Params, Result, Error json.RawMessage
	// IsRequest and IsResponse tell the kinds apart (neither: a notification).
	IsRequest, IsResponse bool
}

// Envelopes decodes a frame (one message or a batch) once and returns its
// well-formed messages in order, skipping the malformed ones; batch reports
// whether the frame was an array.
func Envelopes(frame []byte) (envs []Envelope, batch bool) {
	df := decodeFrame(frame, maxRelayBatch)
	if df.fatal != nil {
		return nil, df.batch
	}
	for k := range df.len() {
		m, derr := df.at(k)
		if derr != nil {
			continue
		}
		e := Envelope{ID: m.id, Params: m.params, Result: m.result, Error: m.errObj,
			IsRequest: m.kind == kindRequest, IsResponse: m.kind == kindResponse}
		if m.method != nil {
			e.Method = string(m.method)
			if m.methodEscaped {
				e.Method = string(unescapeString(m.method))
			}
		}
		envs = append(envs, e)
	}
	return envs, df.batch
}

// maxRelayBatch only stops a relay's own pre-check from rejecting a batch:
// the node behind it enforces its configured MaxBatchLen.
const maxRelayBatch = 1 << 30
