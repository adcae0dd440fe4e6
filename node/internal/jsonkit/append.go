package jsonkit

import "unicode/utf8"

// AppendString appends s to b as a JSON string, byte for byte what
// encoding/json writes with HTML escaping off (json.Encoder with
// SetEscapeHTML(false)): '"', '\\' and control characters escaped (\b, \f,
// \n, \r, \t, else \u00XX), invalid UTF-8 replaced by \ufffd, U+2028 and
// U+2029 escaped, everything else (<, > and & included) copied.
//
// HTML escaping is off everywhere at the edge because the node's output is
// JSON-RPC, never HTML: the rpc layer's reflective encoder already writes
// results that way, so hand-written and reflective output agree, and an
// agent's text full of < and & is not inflated sixfold. Printable ASCII
// takes a copy loop; the rest is escaped here, without reflection.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return appendEscaped(b, s, i)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendStrings appends ss as a JSON array of strings; nil is written as [].
func AppendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendEscaped is AppendString's slow path: s[:start] is known to need no
// escaping. It follows encoding/json's appendString (encode.go) rule by
// rule; FuzzAppendString holds it to that.
func appendEscaped(b []byte, s string, start int) []byte {
	b = append(b, '"')
	b = append(b, s[:start]...)
	last := start // s[last:i] is pending, to be copied as is
	for i := start; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[last:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			last = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript: encoding/json escapes
			// them whatever the HTML setting.
			b = append(b, s[last:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		last = i
	}
	b = append(b, s[last:]...)
	return append(b, '"')
}
