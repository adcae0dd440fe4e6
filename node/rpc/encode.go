package rpc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/concordmap/concord/node/internal/jsonkit"
)

// frame is one encoded outbound JSON-RPC message. Frames are pooled: the
// writer goroutine returns them after they reached the socket buffer.
type frame struct{ b []byte }

// maxPooledFrame keeps one huge payload from pinning memory in the pool.
const maxPooledFrame = 64 << 10

var framePool = sync.Pool{New: func() any { return &frame{b: make([]byte, 0, 1024)} }}

func getFrame() *frame { return framePool.Get().(*frame) }

func putFrame(f *frame) {
	if cap(f.b) > maxPooledFrame {
		return
	}
	f.b = f.b[:0]
	framePool.Put(f)
}

// jsonEncoder is a reusable encoding/json encoder writing into buf. HTML
// escaping is off: the output is not embedded in HTML and escaping would only
// cost bytes.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoderPool = sync.Pool{New: func() any {
	e := &jsonEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// jsonAppender is a result that appends its own JSON encoding, byte for
// byte what encoding/json (HTML escaping off) would write, without
// reflection: hot results such as map/send's implement it.
type jsonAppender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// appendJSON appends the JSON encoding of v. json.RawMessage and []byte-typed
// raw values are appended as they are (the caller vouches they are valid
// JSON: that is the whole point of keeping payloads raw).
func appendJSON(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case json.RawMessage:
		if len(x) == 0 {
			return append(b, "null"...), nil
		}
		return append(b, x...), nil
	case jsonAppender:
		return x.AppendJSON(b)
	}
	e := encoderPool.Get().(*jsonEncoder)
	defer encoderPool.Put(e)
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return b, err
	}
	out := e.buf.Bytes()
	return append(b, out[:len(out)-1]...), nil // drop Encode's '\n'
}

const (
	hdrNotify = `{"jsonrpc":"2.0","method":`
	hdrID     = `{"jsonrpc":"2.0","id":`
)

// encodeRequest builds a request (id != nil) or notification frame. params
// must already be a JSON object or nil.
func encodeRequest(f *frame, id []byte, method string, params []byte) {
	if id == nil {
		f.b = append(f.b, hdrNotify...)
	} else {
		f.b = append(f.b, hdrID...)
		f.b = append(f.b, id...)
		f.b = append(f.b, `,"method":`...)
	}
	f.b = jsonkit.AppendString(f.b, method)
	if len(params) > 0 {
		f.b = append(f.b, `,"params":`...)
		f.b = append(f.b, params...)
	}
	f.b = append(f.b, '}')
}

// appendResponse appends a response object; id nil is written as null.
// If the result cannot be encoded the response becomes a -32603 error, and
// the encoding error is returned for logging.
func appendResponse(b []byte, id []byte, result any, rerr *Error) ([]byte, error) {
	b = append(b, hdrID...)
	if id == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, id...)
	}
	mark := len(b)
	var encErr error
	if rerr == nil {
		b = append(b, `,"result":`...)
		if b, encErr = appendJSON(b, result); encErr == nil {
			return append(b, '}'), nil
		}
		b = b[:mark]
		rerr = internalError()
	}
	b = append(b, `,"error":`...)
	b = appendError(b, rerr)
	return append(b, '}'), encErr
}

// appendError encodes e; Details that fail to encode are dropped rather than
// losing the whole error.
func appendError(b []byte, e *Error) []byte {
	mark := len(b)
	out, err := appendJSON(b, e)
	if err == nil {
		return out
	}
	b = b[:mark]
	c := *e
	if e.Data != nil {
		d := *e.Data
		d.Details = nil
		c.Data = &d
	}
	out, err = appendJSON(b, &c)
	if err != nil {
		// Unreachable: Error without details only holds strings and ints.
		return append(b[:mark], `{"code":-32603,"message":"Internal error"}`...)
	}
	return out
}

// appendUintID appends an integer id for our outbound Calls.
func appendUintID(b []byte, id uint64) []byte { return strconv.AppendUint(b, id, 10) }
