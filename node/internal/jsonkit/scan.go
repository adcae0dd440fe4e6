package jsonkit

import (
	"bytes"
	"encoding/json"
)

// Members and WithoutMember each spell out the object loop instead of
// sharing member-stepping helpers: with those calls (too big to inline)
// a walk of the router's and the hub's inputs measured 20-30% slower, and
// both walks run once per message on the send and fan-out paths. What is tricky (finding a value's end, decoding keys) is shared:
// skipValue and skipWS in walk.go, Unquote and keyIs below.

// Members calls fn for every member of the JSON object obj, in order, with
// the member's key (unescaped) and its raw value, which aliases obj.
// Duplicate keys are passed on as they come; anything but whitespace after
// the object is ErrMalformed. fn returning an error stops the
// walk and Members returns that error unchanged; fn is called for a member
// before the separator after it is checked, so a callback error wins over a
// later syntax error.
func Members(obj []byte, fn func(key string, val []byte) error) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ErrMalformed
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return onlyWSAfter(obj, i+1)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return ErrMalformed
		}
		end, ok := skipValue(obj, i)
		if !ok {
			return ErrMalformed
		}
		key, ok := Unquote(obj[i:end])
		if !ok {
			return ErrMalformed
		}
		i = skipWS(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ErrMalformed
		}
		i = skipWS(obj, i+1)
		if end, ok = skipValue(obj, i); !ok {
			return ErrMalformed
		}
		if err := fn(key, obj[i:end]); err != nil {
			return err
		}
		i = skipWS(obj, end)
		if i >= len(obj) {
			return ErrMalformed
		}
		switch obj[i] {
		case ',':
			i = skipWS(obj, i+1)
		case '}':
			return onlyWSAfter(obj, i+1)
		default:
			return ErrMalformed
		}
	}
}

// onlyWSAfter checks that only whitespace follows the object closed at obj[i-1].
func onlyWSAfter(obj []byte, i int) error {
	if skipWS(obj, i) != len(obj) {
		return ErrMalformed
	}
	return nil
}

// WithoutMember returns obj without its top-level member key (all
// occurrences), and whether obj could be walked (as Members: trailing
// non-whitespace is not). The other members are
// copied byte for byte. Keys are compared in place: only a key containing
// an escape is decoded, so the common case allocates nothing but the
// result.
func WithoutMember(obj []byte, key string) ([]byte, bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	out := make([]byte, 0, len(obj))
	out = append(out, '{')
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return append(out, '}'), onlyWSAfter(obj, i+1) == nil
	}
	for {
		start := i
		if i >= len(obj) || obj[i] != '"' {
			return nil, false
		}
		end, ok := skipValue(obj, i)
		if !ok {
			return nil, false
		}
		match, ok := keyIs(obj[i:end], key)
		if !ok {
			return nil, false
		}
		i = skipWS(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false
		}
		if end, ok = skipValue(obj, skipWS(obj, i+1)); !ok {
			return nil, false
		}
		if !match {
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, obj[start:end]...)
		}
		i = skipWS(obj, end)
		if i >= len(obj) {
			return nil, false
		}
		switch obj[i] {
		case ',':
			i = skipWS(obj, i+1)
		case '}':
			if onlyWSAfter(obj, i+1) != nil {
				return nil, false
			}
			return append(out, '}'), true
		default:
			return nil, false
		}
	}
}

// Unquote decodes a raw JSON string; ok is false if raw is not one.
func Unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
			return s, true
		}
	}
	return string(inner), true
}

// keyIs reports whether the raw JSON string rawKey (quotes included)
// decodes to key. string(inner) == key does not allocate; only a key with
// an escape goes through encoding/json.
func keyIs(rawKey []byte, key string) (match, ok bool) {
	inner := rawKey[1 : len(rawKey)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == key, true
	}
	var k string
	if json.Unmarshal(rawKey, &k) != nil {
		return false, false
	}
	return k == key, true
}
