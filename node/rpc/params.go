package rpc

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Params is a request's params object split into its raw members, for
// methods that read a few plain fields. Every accessor reports a mistake
// as a -32602 *Error naming the field, with one wording for each kind of
// mistake whichever package serves the method:
//
//	params is not an object   field "params": "must be an object"
//	a required field is absent                 "required"
//	a string field is not a string             "must be a string"
//	a required string is ""                    "must not be empty"
//	an integer field is not one, or negative   "must be a non-negative integer"
//
// A member whose value is null reads as absent, and so does an optional
// string that is "". Params is read-only once parsed; it aliases nothing
// the caller keeps (encoding/json copies the values).
type Params map[string]json.RawMessage

// ParseParams splits raw into members. Absent or null params read as an
// empty object.
func ParseParams(raw json.RawMessage) (Params, error) {
	raw = bytes.TrimSpace(raw)
	p := Params{}
	if len(raw) == 0 || string(raw) == "null" {
		return p, nil
	}
	if raw[0] != '{' || json.Unmarshal(raw, &p) != nil {
		return nil, InvalidParams("params", "must be an object")
	}
	for k, v := range p {
		if string(v) == "null" {
			delete(p, k)
		}
	}
	return p, nil
}

// String reads an optional string member: "" when absent or empty.
func (p Params) String(key string) (string, error) {
	s, _, err := p.str(key)
	return s, err
}

// RequiredString reads a string member that must be present and non-empty.
func (p Params) RequiredString(key string) (string, error) {
	s, ok, err := p.str(key)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", InvalidParams(key, "required")
	case s == "":
		return "", InvalidParams(key, "must not be empty")
	}
	return s, nil
}

func (p Params) str(key string) (s string, present bool, err error) {
	v, ok := p[key]
	if !ok {
		return "", false, nil
	}
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", true, InvalidParams(key, "must be a string")
	}
	return s, true, nil
}

// Int reads an optional non-negative integer member; ok is false when it
// is absent.
func (p Params) Int(key string) (n int64, ok bool, err error) {
	v, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	n, perr := strconv.ParseInt(string(v), 10, 64)
	if perr != nil || n < 0 {
		return 0, false, InvalidParams(key, "must be a non-negative integer")
	}
	return n, true, nil
}
