package runs

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// members calls fn with the key and the raw value bytes of each member of
// the JSON object b, in order, without decoding the values. It exists for
// replies, whose payload can be a megabyte an agent produced: only the
// top level is parsed here, and nested values are only checked for
// terminated strings and balanced brackets; their consumers decode them
// (the engine validates the payload deterministically in Apply). It
// reports false for anything that is not an object at the top level; fn
// returning false stops the scan.
func members(b []byte, fn func(key string, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end, ok := skipString(b, i)
		if !ok {
			return false
		}
		key, ok := unquote(b[i:end])
		if !ok {
			return false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		start := skipSpace(b, i+1)
		end, ok = skipValue(b, start)
		if !ok {
			return false
		}
		if !fn(key, b[start:end]) {
			return true
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	depth := 0
	start := i
	for i < len(b) {
		switch b[i] {
		case '"':
			j, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			i = j
			if depth == 0 {
				return i, true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, i > start
			}
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i, i > start
			}
		}
		i++
	}
	return i, depth == 0 && i > start
}

// unquote decodes a JSON string token; valid UTF-8 without escapes is
// taken as is (encoding/json would not change it either).
func unquote(tok []byte) (string, bool) {
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return "", false
	}
	return s, true
}
