package rpc

import (
	"encoding/binary"
	"errors"
)

// A small validating JSON scanner. It exists so that an inbound frame is
// walked exactly once: the envelope keys are located and every value is
// validated in the same pass, and params stay as a sub-slice of the frame
// (no reflection, no re-marshalling). FuzzScanValue checks it against
// encoding/json.Valid.

// maxNestingDepth bounds recursion on hostile input (encoding/json uses 10000;
// MAP payloads never come close to this).
const maxNestingDepth = 1000

var (
	errSyntax   = errors.New("invalid JSON")
	errTooDeep  = errors.New("JSON nesting too deep")
	errTrailing = errors.New("unexpected data after JSON value")
)

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanValue validates the JSON value that starts at data[i] (no leading
// whitespace) and returns the index just past it.
func scanValue(data []byte, i, depth int) (int, error) {
	if i >= len(data) {
		return i, errSyntax
	}
	switch c := data[i]; {
	case c == '"':
		return scanString(data, i)
	case c == '{':
		return scanObject(data, i, depth+1)
	case c == '[':
		return scanArray(data, i, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(data, i)
	case c == 't':
		return scanLiteral(data, i, "true")
	case c == 'f':
		return scanLiteral(data, i, "false")
	case c == 'n':
		return scanLiteral(data, i, "null")
	default:
		return i, errSyntax
	}
}

func scanLiteral(data []byte, i int, lit string) (int, error) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, errSyntax
	}
	return i + len(lit), nil
}

// scanString validates the string starting at data[i] == '"' and returns the
// index after its closing quote. UTF-8 validity is checked once per frame by
// the caller, not here.
func scanString(data []byte, i int) (int, error) {
	i++
	for i < len(data) {
		// Skip 8 plain bytes at a time: payloads are mostly long runs
		// without quotes, backslashes or control characters.
		for i+8 <= len(data) && !hasSpecial8(binary.LittleEndian.Uint64(data[i:])) {
			i += 8
		}
		if i >= len(data) {
			break
		}
		c := data[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(data) {
				return i, errSyntax
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(data)-i < 6 || !isHex(data[i+2]) || !isHex(data[i+3]) || !isHex(data[i+4]) || !isHex(data[i+5]) {
					return i, errSyntax
				}
				i += 6
			default:
				return i, errSyntax
			}
		case c < 0x20:
			return i, errSyntax
		default:
			i++
		}
	}
	return i, errSyntax
}

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// hasSpecial8 reports whether any byte of the 8 packed in x is '"', '\\'
// or below 0x20 (exact, no false negatives: the classic "has zero byte /
// has byte less than n" bit tricks, n <= 128).
func hasSpecial8(x uint64) bool {
	less20 := (x - swarOnes*0x20) & ^x
	q := x ^ (swarOnes * '"')
	quote := (q - swarOnes) & ^q
	bs := x ^ (swarOnes * '\\')
	back := (bs - swarOnes) & ^bs
	return (less20|quote|back)&swarHighs != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(data []byte, i int) (int, error) {
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		return i, errSyntax
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return i, errSyntax
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return i, errSyntax
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	return i, nil
}

func scanObject(data []byte, i, depth int) (int, error) {
	if depth > maxNestingDepth {
		return i, errTooDeep
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return i, errSyntax
		}
		var err error
		if i, err = scanString(data, i); err != nil {
			return i, err
		}
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ':' {
			return i, errSyntax
		}
		if i, err = scanValue(data, skipSpace(data, i+1), depth); err != nil {
			return i, err
		}
		i = skipSpace(data, i)
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

func scanArray(data []byte, i, depth int) (int, error) {
	if depth > maxNestingDepth {
		return i, errTooDeep
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = scanValue(data, i, depth); err != nil {
			return i, err
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return i, errSyntax
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			return i + 1, nil
		default:
			return i, errSyntax
		}
	}
}

// validJSON reports whether data is exactly one JSON value with optional
// surrounding whitespace.
func validJSON(data []byte) bool {
	end, err := scanValue(data, skipSpace(data, 0), 0)
	return err == nil && skipSpace(data, end) == len(data)
}
