package jsonscan

// The three steps shared by Members and WithoutMember. Each reports
// ok == false instead of indexing past the end, so malformed input can
// never panic.

// open checks that obj starts a JSON object and returns the index of its
// first member, or empty == true for {}.
func open(obj []byte) (first int, empty, ok bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return i, false, false
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return i, true, true
	}
	return i, false, true
}

// member reads the member whose key starts at obj[i]: it returns the raw
// key (quotes included, escapes not decoded), the raw value and the index
// just past the value, so obj[i:end] is the member as written.
func member(obj []byte, i int) (rawKey, val []byte, end int, ok bool) {
	if i >= len(obj) || obj[i] != '"' {
		return nil, nil, i, false
	}
	kend, ok := skipValue(obj, i)
	if !ok {
		return nil, nil, kend, false
	}
	j := skipWS(obj, kend)
	if j >= len(obj) || obj[j] != ':' {
		return nil, nil, j, false
	}
	j = skipWS(obj, j+1)
	if end, ok = skipValue(obj, j); !ok {
		return nil, nil, end, false
	}
	return obj[i:kend], obj[j:end], end, true
}

// next steps over the separator after a value ending at obj[end]: it
// returns the index of the next member, or done == true at the closing
// brace.
func next(obj []byte, end int) (i int, done, ok bool) {
	i = skipWS(obj, end)
	if i >= len(obj) {
		return i, false, false
	}
	switch obj[i] {
	case ',':
		return skipWS(obj, i+1), false, true
	case '}':
		return i, true, true
	default:
		return i, false, false
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i].
// It trusts the input to be valid and only finds the value's end: strings
// by their closing quote (skipping escapes), objects and arrays by bracket
// depth (skipping strings, so brackets inside them do not count), numbers
// and literals by the next delimiter.
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
	default: // number or literal
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
			b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j, j > i
	}
}
