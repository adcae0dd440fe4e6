package consensus

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// outScanner is the lexical half of the round-output decoder: a strict
// RFC 8259 scanner over one result that accepts exactly the documents
// encoding/json accepts (same grammar, same nesting limit, same string
// unescaping) without reflection. Decoded strings are appended to arena;
// the caller turns the arena into one string at the end, so an output of
// hundreds of strings costs one allocation instead of hundreds.
//
// Errors are sticky: the first problem sets bad and moves pos to the end,
// after which every method returns zero values. The caller checks bad once
// per loop. A rejected result is re-decoded by encoding/json only to word
// the error (see decodeRoundOutput), so the scanner does not say why.
type outScanner struct {
	in    []byte
	pos   int
	bad   bool
	arena []byte
	key   []byte // scratch for keys with escapes
	stack []byte // open containers while skipping a value
}

// maxJSONDepth is encoding/json's nesting limit (scanner.maxNestingDepth):
// a document nesting more than this many arrays and objects is invalid.
const maxJSONDepth = 10000

// span is a decoded string: bytes [off, end) of the arena.
type span struct{ off, end int32 }

func (s span) len() int { return int(s.end - s.off) }

func (d *outScanner) fail() { d.bad = true; d.pos = len(d.in) }

func (d *outScanner) ws() {
	for d.pos < len(d.in) {
		switch d.in[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, or 0 at the end. The
// test up front keeps the common case (no whitespace) inlined.
func (d *outScanner) peek() byte {
	if d.pos < len(d.in) && d.in[d.pos] > ' ' {
		return d.in[d.pos]
	}
	d.ws()
	if d.pos < len(d.in) {
		return d.in[d.pos]
	}
	return 0
}

// consume skips whitespace and consumes c, failing when c is not next.
func (d *outScanner) consume(c byte) {
	if d.peek() != c {
		d.fail()
		return
	}
	d.pos++
}

// literal consumes the keyword lit (true, false or null) at pos.
func (d *outScanner) literal(lit string) {
	end := d.pos + len(lit)
	if end > len(d.in) || string(d.in[d.pos:end]) != lit {
		d.fail()
		return
	}
	d.pos = end
}

// null consumes a null at the next token and reports whether there was one.
func (d *outScanner) null() bool {
	if d.peek() != 'n' {
		return false
	}
	d.literal("null")
	return !d.bad
}

// str decodes the string at pos into the arena.
func (d *outScanner) str() span {
	off := len(d.arena)
	d.arena = d.unquote(d.arena)
	if d.bad {
		d.arena = d.arena[:off]
		return span{}
	}
	return span{int32(off), int32(len(d.arena))}
}

// plainByte[c] is true for the bytes a string holds verbatim: anything but
// '"', '\\' and control characters.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainRun returns the end of the run of plain bytes starting at in[j],
// testing eight bytes at a time. In the SWAR mask, the lowest flagged byte
// is exactly the first '"', '\\' or control character of the word: only a
// flagged byte can borrow from the next one, so nothing below the first is
// flagged.
func plainRun(in []byte, j int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; j+8 <= len(in); j += 8 {
		w := binary.LittleEndian.Uint64(in[j:])
		q := w ^ ('"' * ones)
		b := w ^ ('\\' * ones)
		if m := ((q-ones)&^q | (b-ones)&^b | (w-0x20*ones)&^w) & highs; m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
	}
	for j < len(in) && plainByte[in[j]] {
		j++
	}
	return j
}

// rawString returns the contents of the string at pos and moves past it
// when it has no escapes; otherwise it returns false and does not move.
func (d *outScanner) rawString() ([]byte, bool) {
	in := d.in
	if d.pos >= len(in) || in[d.pos] != '"' {
		return nil, false
	}
	j := plainRun(in, d.pos+1)
	if j >= len(in) || in[j] != '"' {
		return nil, false
	}
	s := in[d.pos+1 : j]
	d.pos = j + 1
	return s, true
}

// unquote appends the decoded string at pos (which must be '"') to dst.
func (d *outScanner) unquote(dst []byte) []byte {
	if raw, ok := d.rawString(); ok {
		return append(dst, raw...)
	}
	in := d.in
	i := d.pos + 1
	if d.pos >= len(in) || in[d.pos] != '"' {
		d.fail()
		return dst
	}
	for {
		j := plainRun(in, i)
		dst = append(dst, in[i:j]...)
		if j >= len(in) || in[j] < 0x20 {
			d.fail()
			return dst
		}
		if in[j] == '"' {
			d.pos = j + 1
			return dst
		}
		dst, i = d.escape(dst, j)
		if d.bad {
			return dst
		}
	}
}

// escape decodes the escape sequence at in[j] == '\\' and returns the
// position after it. Like encoding/json, a \u escape of a surrogate that
// does not start a valid pair becomes U+FFFD and the next escape is
// decoded on its own.
func (d *outScanner) escape(dst []byte, j int) ([]byte, int) {
	in := d.in
	if j+1 >= len(in) {
		d.fail()
		return dst, j
	}
	switch c := in[j+1]; c {
	case '"', '\\', '/':
		return append(dst, c), j + 2
	case 'b':
		return append(dst, '\b'), j + 2
	case 'f':
		return append(dst, '\f'), j + 2
	case 'n':
		return append(dst, '\n'), j + 2
	case 'r':
		return append(dst, '\r'), j + 2
	case 't':
		return append(dst, '\t'), j + 2
	case 'u':
		r := hex4(in, j+2)
		if r < 0 {
			d.fail()
			return dst, j
		}
		j += 6
		if utf16.IsSurrogate(r) {
			if j+1 < len(in) && in[j] == '\\' && in[j+1] == 'u' {
				if pair := utf16.DecodeRune(r, hex4(in, j+2)); pair != utf8.RuneError {
					return utf8.AppendRune(dst, pair), j + 6
				}
			}
			r = utf8.RuneError
		}
		return utf8.AppendRune(dst, r), j
	}
	d.fail()
	return dst, j
}

// hex4 decodes the four hex digits at in[i:], or returns -1.
func hex4(in []byte, i int) rune {
	if i+4 > len(in) {
		return -1
	}
	var r rune
	for _, c := range in[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// objectKey decodes the member name at pos and consumes the colon after it.
// The result aliases the input (no escapes) or the key scratch buffer, and
// is valid until the next key.
func (d *outScanner) objectKey() []byte {
	if d.peek() != '"' {
		d.fail()
		return nil
	}
	k, ok := d.rawString()
	if !ok {
		d.key = d.unquote(d.key[:0])
		k = d.key
	}
	d.consume(':')
	return k
}

// beginObject consumes '{' and reports whether a member follows; it leaves
// pos at that member's name.
func (d *outScanner) beginObject() bool {
	d.consume('{')
	if d.peek() == '}' {
		d.pos++
		return false
	}
	return !d.bad
}

// nextMember consumes the separator after a member and reports whether
// another member follows.
func (d *outScanner) nextMember() bool {
	switch d.peek() {
	case ',':
		d.pos++
		return true
	case '}':
		d.pos++
		return false
	}
	d.fail()
	return false
}

// beginArray consumes '[' and reports whether an element follows.
func (d *outScanner) beginArray() bool {
	d.consume('[')
	if d.peek() == ']' {
		d.pos++
		return false
	}
	return !d.bad
}

// nextElement consumes the separator after an element and reports whether
// another element follows.
func (d *outScanner) nextElement() bool {
	switch d.peek() {
	case ',':
		d.pos++
		return true
	case ']':
		d.pos++
		return false
	}
	d.fail()
	return false
}
