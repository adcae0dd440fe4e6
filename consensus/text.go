package consensus

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// isJSSpace reports whether r is whitespace for JavaScript's String.prototype.trim
// and the \s regular-expression class (WhiteSpace plus LineTerminator). argue
// measures lengths after a JS trim, so Go's unicode.IsSpace (which includes
// U+0085 and excludes U+FEFF) would change scores.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x00A0, 0x1680, 0x2028, 0x2029,
		0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// jsTrim trims JavaScript whitespace from both ends of s.
func jsTrim(s string) string { return strings.TrimFunc(s, isJSSpace) }

// utf16Len returns the length of s in UTF-16 code units, as JavaScript's
// String.length reports it.
func utf16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// trimmedLen is argue's `len`: UTF-16 length after a JS trim.
func trimmedLen(s string) int { return utf16Len(jsTrim(s)) }

// trimmedLenCap is min(trimmedLen(s), limit), counting no further than
// the limit: scoring only compares lengths up to a saturation point (§13),
// and a full response can be 256 KiB.
func trimmedLenCap(s string, limit int) int {
	s = jsTrim(s)
	n := 0
	for i := 0; i < len(s) && n < limit; {
		if c := s[i]; c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return min(n, limit)
}

// utf16Prefix returns the longest prefix of s holding at most n UTF-16 code
// units. A surrogate pair that would be split is dropped whole: JavaScript
// would keep a lone surrogate, which Go strings cannot carry (see DESIGN.md).
func utf16Prefix(s string, n int) string {
	units := 0
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}

// utf16Suffix returns the longest suffix of s holding at most n UTF-16 units.
func utf16Suffix(s string, n int) string {
	units := 0
	i := len(s)
	for i > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > n {
			break
		}
		units += w
		i -= size
	}
	return s[i:]
}

// utf16Within reports utf16Len(s) <= max, counting no further than max + 1
// units: a UTF-16 unit takes at least one UTF-8 byte, so a string of at most
// max bytes needs no count, and a long one is cut short.
func utf16Within(s string, max int) bool {
	if len(s) <= max {
		return true
	}
	n := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			n++
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			i += size
			n++
			if r >= 0x10000 {
				n++
			}
		}
		if n > max {
			return false
		}
	}
	return true
}

// truncateTail cuts s to max UTF-16 units, ending with an ellipsis when cut.
func truncateTail(s string, max int) (string, bool) {
	if utf16Within(s, max) {
		return s, false
	}
	return utf16Prefix(s, max-1) + "…", true
}

// truncateMiddle keeps the head and tail of s around an ellipsis.
func truncateMiddle(s string, max int) (string, bool) {
	if utf16Within(s, max) {
		return s, false
	}
	head := (max - 1) / 2
	tail := max - 1 - head
	return utf16Prefix(s, head) + "…" + utf16Suffix(s, tail), true
}

// collapseSpace replaces every run of JS whitespace with one space and trims,
// like `s.replace(/\s+/g, " ").trim()`.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	writeCollapsed(&b, s)
	return b.String()
}

// writeCollapsed writes collapseSpace(s) to b (which may already hold
// text), without building the collapsed string on its own.
func writeCollapsed(b *strings.Builder, s string) {
	pending, wrote := false, false
	for _, r := range s {
		if isJSSpace(r) {
			pending = true
			continue
		}
		if pending && wrote {
			b.WriteByte(' ')
		}
		pending, wrote = false, true
		b.WriteRune(r)
	}
}

// roundHalfUp rounds v to the nearest integer, halves going up, exactly as
// §22.5 prescribes (floor, then bump when the remainder is at least 0.5).
func roundHalfUp(v float64) float64 {
	f := math.Floor(v)
	if v-f >= 0.5 {
		f++
	}
	return f
}

// round2 is argue's two-decimal rounding: roundHalfUp(x·100)/100.
func round2(x float64) float64 { return roundHalfUp(x*100) / 100 }

func clamp01(x float64) float64 { return math.Min(1, math.Max(0, x)) }

// isoTime formats a millisecond timestamp like JavaScript's toISOString
// (time.Format's "2006-01-02T15:04:05.000Z", written by hand for the
// four-digit years every real clock gives: it runs once per step).
func isoTime(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format("2006-01-02T15:04:05.000Z")
	}
	hour, min, sec := t.Clock()
	var b [24]byte
	put := func(i, v, n int) {
		for k := i + n - 1; k >= i; k-- {
			b[k] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, year, 4)
	b[4] = '-'
	put(5, int(month), 2)
	b[7] = '-'
	put(8, day, 2)
	b[10] = 'T'
	put(11, hour, 2)
	b[13] = ':'
	put(14, min, 2)
	b[16] = ':'
	put(17, sec, 2)
	b[19] = '.'
	put(20, t.Nanosecond()/1e6, 3)
	b[23] = 'Z'
	return string(b[:])
}
