package jsonscan

import (
	"bytes"
	"encoding/json"
)

// Members calls fn for every member of the JSON object obj, in order, with
// the member's key (unescaped) and its raw value, which aliases obj.
// Duplicate keys are passed on as they come. fn returning an error stops the
// walk and Members returns that error unchanged; fn is called for a member
// before the separator after it is checked, so a callback error wins over a
// later syntax error.
func Members(obj []byte, fn func(key string, val []byte) error) error {
	i, empty, ok := open(obj)
	if !ok {
		return ErrMalformed
	}
	if empty {
		return nil
	}
	for {
		rawKey, val, end, ok := member(obj, i)
		if !ok {
			return ErrMalformed
		}
		key, ok := Unquote(rawKey)
		if !ok {
			return ErrMalformed
		}
		if err := fn(key, val); err != nil {
			return err
		}
		var done bool
		if i, done, ok = next(obj, end); !ok {
			return ErrMalformed
		} else if done {
			return nil
		}
	}
}

// WithoutMember returns obj without its top-level member key (all
// occurrences), and whether obj could be walked. The other members are
// copied byte for byte. Keys are compared in place: only a key containing
// an escape is decoded, so the common case allocates nothing but the
// result.
func WithoutMember(obj []byte, key string) ([]byte, bool) {
	i, empty, ok := open(obj)
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, len(obj))
	out = append(out, '{')
	if empty {
		return append(out, '}'), true
	}
	for {
		rawKey, _, end, ok := member(obj, i)
		if !ok {
			return nil, false
		}
		match, ok := keyIs(rawKey, key)
		if !ok {
			return nil, false
		}
		if !match {
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, obj[i:end]...)
		}
		var done bool
		if i, done, ok = next(obj, end); !ok {
			return nil, false
		} else if done {
			return append(out, '}'), true
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
