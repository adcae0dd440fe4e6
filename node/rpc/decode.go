package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MaxIDBytes bounds a request id as sent (a JSON string with its quotes, or
// an integer). A longer id is refused with -32600 and id null: it is never
// echoed, so a peer cannot make us send its megabytes back.
const MaxIDBytes = 256

// MaxMethodBytes bounds a method name; longer ones are refused with -32600
// (they would be echoed in "Method not found" and used as metric labels).
const MaxMethodBytes = 128

// Request is one decoded inbound JSON-RPC request or notification.
//
// ID and Params are sub-slices of a buffer that belongs to this message alone
// (it is never reused), so a handler may keep them after Handle returns
// without copying. Params is the raw JSON object exactly as the peer sent it;
// it was validated once and is never re-marshalled.
type Request struct {
	// ID is the raw JSON id (a JSON string with its quotes, or an integer),
	// nil for a notification.
	ID json.RawMessage
	// Method is the method name, never empty.
	Method string
	// Params is the raw params object, nil if the peer sent none (or null).
	Params json.RawMessage
}

// IsNotification reports whether the request carries no id (no reply is sent).
func (r *Request) IsNotification() bool { return r.ID == nil }

// msgKind tells what a decoded object is.
type msgKind uint8

const (
	kindRequest  msgKind = iota + 1 // request or notification
	kindResponse                    // answer to one of our Calls
)

// message is one decoded JSON-RPC object. Every slice aliases the frame.
type message struct {
	kind          msgKind
	id            []byte // raw id, nil if absent
	method        []byte // contents between the quotes (still escaped if methodEscaped)
	methodEscaped bool
	params        []byte
	result        []byte
	errObj        []byte
}

// decodeError says why a frame or object is not a valid message. id is set
// when a well-typed id was read, so the error reply can echo it.
type decodeError struct {
	code   int
	reason string
	id     []byte
}

func (e *decodeError) rpcError() *Error {
	return NewError(e.code, "").WithDetails(map[string]any{"reason": e.reason})
}

// member keys of the envelope, tracked to reject duplicates.
const (
	seenJSONRPC = 1 << iota
	seenID
	seenMethod
	seenParams
	seenResult
	seenError
)

// envelope accumulates the members of one object while it is scanned.
type envelope struct {
	msg        message
	seen       int
	versionOK  bool
	idBad      bool // id present but not a string or integer
	idLong     bool // id longer than MaxIDBytes: refused, never echoed
	methodLong bool // method longer than MaxMethodBytes
	idNull     bool
	paramsBad  int // 0, or the error code a bad params type earns
	methodBad  bool
	dup        bool
}

// decodeObject decodes the JSON-RPC object in data (surrounding whitespace
// allowed, nothing else). A syntax error yields CodeParseError.
func decodeObject(data []byte) (message, *decodeError) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		if _, err := scanValue(data, i, 0); err != nil || !validJSON(data) {
			return message{}, &decodeError{code: CodeParseError, reason: "invalid JSON"}
		}
		return message{}, &decodeError{code: CodeInvalidRequest, reason: "message is not a JSON object"}
	}
	var env envelope
	end, err := env.scanMembers(data, i)
	if err != nil {
		return message{}, &decodeError{code: CodeParseError, reason: err.Error()}
	}
	if skipSpace(data, end) != len(data) {
		return message{}, &decodeError{code: CodeParseError, reason: errTrailing.Error()}
	}
	return env.classify()
}

// scanMembers walks the object at data[i] == '{' once, validating every
// value and remembering the spans of the envelope members.
func (env *envelope) scanMembers(data []byte, i int) (int, error) {
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return i, errSyntax
		}
		keyEnd, err := scanString(data, i)
		if err != nil {
			return keyEnd, err
		}
		key := data[i+1 : keyEnd-1]
		i = skipSpace(data, keyEnd)
		if i >= len(data) || data[i] != ':' {
			return i, errSyntax
		}
		vStart := skipSpace(data, i+1)
		vEnd, err := scanValue(data, vStart, 1)
		if err != nil {
			return vEnd, err
		}
		env.member(key, data[vStart:vEnd])
		i = skipSpace(data, vEnd)
		if i >= len(data) {
			return i, errSyntax
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, errSyntax
		}
	}
}

// member records one key/value pair. Unknown keys are ignored (MAP policy:
// accept a superset of what the schema allows).
func (env *envelope) member(key, val []byte) {
	if bytes.IndexByte(key, '\\') >= 0 {
		key = unescapeString(key)
	}
	var bit int
	switch string(key) {
	case "jsonrpc":
		bit = seenJSONRPC
		env.versionOK = string(val) == `"2.0"` || (val[0] == '"' && string(unescapeString(val[1:len(val)-1])) == "2.0")
	case "id":
		bit = seenID
		env.msg.id = val
		switch {
		case val[0] == '"':
		case val[0] == 'n':
			env.idNull = true
			env.msg.id = nil
		case val[0] == '-' || isDigit(val[0]):
			env.idBad = bytes.ContainsAny(val, ".eE")
		default:
			env.idBad = true
		}
		if len(val) > MaxIDBytes {
			env.idLong = true
		}
		if env.idBad || env.idLong {
			env.msg.id = nil
		}
	case "method":
		bit = seenMethod
		if val[0] == '"' && len(val) > MaxMethodBytes+2 {
			env.methodLong = true
		} else if val[0] == '"' {
			env.msg.method = val[1 : len(val)-1]
			env.msg.methodEscaped = bytes.IndexByte(env.msg.method, '\\') >= 0
		} else {
			env.methodBad = true
		}
	case "params":
		bit = seenParams
		switch val[0] {
		case '{':
			env.msg.params = val
		case 'n':
			// null is read as "no params": some clients send it.
		case '[':
			env.paramsBad = CodeInvalidParams
		default:
			env.paramsBad = CodeInvalidRequest
		}
	case "result":
		bit = seenResult
		env.msg.result = val
	case "error":
		bit = seenError
		env.msg.errObj = val
	default:
		return
	}
	if env.seen&bit != 0 {
		env.dup = true
	}
	env.seen |= bit
}

// classify turns the scanned members into a request, a response, or the
// error the peer gets back.
func (env *envelope) classify() (message, *decodeError) {
	m := env.msg
	invalid := func(reason string) (message, *decodeError) {
		return message{}, &decodeError{code: CodeInvalidRequest, reason: reason, id: m.id}
	}
	switch {
	case env.dup:
		return invalid("duplicate member")
	case env.idBad:
		return invalid("id must be a string or an integer")
	case env.idLong:
		return invalid(fmt.Sprintf("id longer than %d bytes", MaxIDBytes))
	case env.seen&seenMethod != 0:
		return env.classifyRequest()
	case env.seen&(seenResult|seenError) == 0:
		return invalid("missing method")
	case env.seen&seenResult != 0 && env.seen&seenError != 0:
		return invalid("response has both result and error")
	case m.id == nil && !env.idNull:
		return invalid("response without id")
	}
	m.kind = kindResponse
	return m, nil
}

func (env *envelope) classifyRequest() (message, *decodeError) {
	m := env.msg
	fail := func(code int, reason string) (message, *decodeError) {
		return message{}, &decodeError{code: code, reason: reason, id: m.id}
	}
	switch {
	case env.seen&(seenResult|seenError) != 0:
		return fail(CodeInvalidRequest, "request must not carry result or error")
	case !env.versionOK:
		return fail(CodeInvalidRequest, `jsonrpc must be "2.0"`)
	case env.idNull:
		return fail(CodeInvalidRequest, "id must be a string or an integer")
	case env.methodLong:
		return fail(CodeInvalidRequest, fmt.Sprintf("method longer than %d bytes", MaxMethodBytes))
	case env.methodBad || len(m.method) == 0:
		return fail(CodeInvalidRequest, "method must be a non-empty string")
	case env.paramsBad == CodeInvalidParams:
		return fail(CodeInvalidParams, "params must be an object")
	case env.paramsBad != 0:
		return fail(CodeInvalidRequest, "params must be an object")
	}
	m.kind = kindRequest
	return m, nil
}

// unescapeString decodes the contents of a JSON string (without quotes).
// Only used for keys and values that actually contain a backslash, which
// well-behaved peers never send in the envelope.
func unescapeString(raw []byte) []byte {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return raw
	}
	return []byte(s)
}

// idFromPrefix recovers the id of a message of which only the first bytes are
// known (an oversized frame): it walks the top-level members until the data
// runs out and returns the id if a complete, well-typed one was seen.
func idFromPrefix(prefix []byte) []byte {
	i := skipSpace(prefix, 0)
	if i >= len(prefix) || prefix[i] != '{' {
		return nil
	}
	var env envelope
	_, _ = env.scanMembers(prefix, i) // a truncation error is expected
	if env.idBad || env.idLong || env.dup {
		return nil
	}
	return env.msg.id
}
