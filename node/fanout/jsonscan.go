package fanout

// A minimal walker to drop one member from a JSON object without
// re-encoding the rest (the payload of message events, which the hub
// strips for most subscriptions). The input is JSON the router or the
// registry produced; anything unexpected makes the caller fall back to
// encoding/json.

import (
	"bytes"
	"encoding/json"
)

// withoutMember returns obj without its top-level member key (all
// occurrences), and whether obj could be walked.
func withoutMember(obj []byte, key string) ([]byte, bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	out := make([]byte, 0, len(obj))
	out = append(out, '{')
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return append(out, '}'), true
	}
	for {
		start := i
		end, ok := skipValue(obj, i)
		if !ok || obj[i] != '"' {
			return nil, false
		}
		match := string(obj[i+1:end-1]) == key // no allocation
		if bytes.IndexByte(obj[i+1:end-1], '\\') >= 0 {
			var k string
			if json.Unmarshal(obj[i:end], &k) != nil {
				return nil, false
			}
			match = k == key
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
			return append(out, '}'), true
		default:
			return nil, false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		return len(b), false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipValue(b, j)
				if !ok {
					return end, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return len(b), false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
			b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j, j > i
	}
}
