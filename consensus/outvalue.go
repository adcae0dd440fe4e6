package consensus

import "strconv"

// Numbers and skipped values of the round-output scanner (outscan.go).

// number consumes a number token (JSON grammar) and returns its text.
func (d *outScanner) number() []byte {
	in, i := d.in, d.pos
	start := i
	if i < len(in) && in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && in[i] >= '1' && in[i] <= '9':
		i = digits(in, i)
	default:
		d.fail()
		return nil
	}
	if i < len(in) && in[i] == '.' {
		if i+1 >= len(in) || !isDigit(in[i+1]) {
			d.fail()
			return nil
		}
		i = digits(in, i+1)
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if i >= len(in) || !isDigit(in[i]) {
			d.fail()
			return nil
		}
		i = digits(in, i)
	}
	d.pos = i
	return in[start:i]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(in []byte, i int) int {
	for i < len(in) && isDigit(in[i]) {
		i++
	}
	return i
}

// float decodes the number at pos as encoding/json decodes into a float64:
// strconv.ParseFloat, and a number out of range is a type error.
func (d *outScanner) float() float64 {
	lit := d.number()
	if d.bad {
		return 0
	}
	if f, ok := exactFloat(lit); ok {
		return f
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		d.fail()
		return 0
	}
	return f
}

// float64pow10 holds the powers of ten float64 represents exactly.
var float64pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactFloat converts a plain decimal (no exponent, at most 15 significant
// digits, at most 22 fraction digits) without allocating. Both the digits
// and the power of ten are exact in float64 and IEEE division rounds
// correctly, so the result is bit-identical to strconv.ParseFloat (this is
// strconv's own exact fast path). Anything else is left to ParseFloat.
func exactFloat(lit []byte) (float64, bool) {
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	var mant uint64
	n, frac, dot := 0, 0, false
	for _, c := range lit {
		switch {
		case c == '.':
			dot = true
			continue
		case !isDigit(c):
			return 0, false
		}
		mant = mant*10 + uint64(c-'0')
		if n++; n > 15 {
			return 0, false
		}
		if dot {
			frac++
		}
	}
	if frac >= len(float64pow10) {
		return 0, false
	}
	f := float64(mant) / float64pow10[frac]
	if neg {
		f = -f
	}
	return f, true
}

// skip consumes one value of any type, checking it as strictly as a known
// field: unknown keys are dropped, but never unchecked. depth is the number
// of containers already open around the value.
func (d *outScanner) skip(depth int) {
	stack := d.stack[:0]
	for !d.bad {
		switch d.peek() {
		case '{', '[':
			c := d.in[d.pos]
			if depth+len(stack)+1 > maxJSONDepth {
				d.fail()
				break
			}
			d.pos++
			stack = append(stack, c)
			if close := closer(c); d.peek() == close {
				d.pos++
				stack = stack[:len(stack)-1]
			} else {
				if c == '{' {
					d.objectKey()
				}
				continue
			}
		case '"':
			d.unquoteSkip()
		case 't':
			d.literal("true")
		case 'f':
			d.literal("false")
		case 'n':
			d.literal("null")
		default:
			d.number()
		}
		// A value ended: close containers until one continues.
		for !d.bad && len(stack) > 0 {
			top := stack[len(stack)-1]
			c := d.peek()
			if c == ',' {
				d.pos++
				if top == '{' {
					d.objectKey()
				}
				break
			}
			if c != closer(top) {
				d.fail()
				break
			}
			d.pos++
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			break
		}
	}
	d.stack = stack
}

func closer(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

// unquoteSkip checks the string at pos without keeping it.
func (d *outScanner) unquoteSkip() {
	d.key = d.unquote(d.key[:0])
}
