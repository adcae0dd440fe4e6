package router

import (
	"encoding/json"
	"errors"
)

// A minimal walker over JSON objects. The rpc layer has already validated
// every frame, so this only splits an object into raw members without a
// second validating pass or a map; it still reports malformed input
// instead of panicking, because DeliverLocal and tests can feed it anything.

var errMalformed = errors.New("router: malformed JSON")

// eachMember calls fn for every member of the JSON object obj with the
// member's key (unescaped) and raw value. Duplicate keys are passed on as
// they come. fn returning an error stops the walk.
func eachMember(obj []byte, fn func(key string, val []byte) error) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errMalformed
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return errMalformed
		}
		end, err := skipValue(obj, i)
		if err != nil {
			return err
		}
		key, ok := unquote(obj[i:end])
		if !ok {
			return errMalformed
		}
		i = skipWS(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return errMalformed
		}
		i = skipWS(obj, i+1)
		vend, err := skipValue(obj, i)
		if err != nil {
			return err
		}
		if err := fn(key, obj[i:vend]); err != nil {
			return err
		}
		i = skipWS(obj, vend)
		if i >= len(obj) {
			return errMalformed
		}
		switch obj[i] {
		case ',':
			i = skipWS(obj, i+1)
		case '}':
			return nil
		default:
			return errMalformed
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return i, errMalformed
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return len(b), errMalformed
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipValue(b, j)
				if err != nil {
					return end, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return len(b), errMalformed
	default: // number or literal
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
			b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return j, errMalformed
		}
		return j, nil
	}
}

// unquote decodes a raw JSON string; ok is false if raw is not one.
func unquote(raw []byte) (string, bool) {
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
