package consensus

import (
	"encoding/binary"
	"math"
)

// wbuf is an append-only encoder for the state format.
type wbuf struct{ b []byte }

func (w *wbuf) u8(v uint8)     { w.b = append(w.b, v) }
func (w *wbuf) uvar(v uint64)  { w.b = binary.AppendUvarint(w.b, v) }
func (w *wbuf) ivar(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *wbuf) num(v int)      { w.b = binary.AppendVarint(w.b, int64(v)) }
func (w *wbuf) str(s string)   { w.uvar(uint64(len(s))); w.b = append(w.b, s...) }
func (w *wbuf) bytes(p []byte) { w.uvar(uint64(len(p))); w.b = append(w.b, p...) }
func (w *wbuf) f64(f float64)  { w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(f)) }
func (w *wbuf) count(n int)    { w.uvar(uint64(n)) }
func (w *wbuf) boolean(v bool) {
	if v {
		w.u8(1)
	} else {
		w.u8(0)
	}
}

// optStr writes a presence byte and the string.
func (w *wbuf) optStr(p *string) {
	w.boolean(p != nil)
	if p != nil {
		w.str(*p)
	}
}

// rbuf is a bounds-checked decoder with a sticky error: after the first
// problem every read returns zero values, so callers check err once.
type rbuf struct {
	b   []byte
	off int
	bad bool
}

func (r *rbuf) fail() { r.bad = true; r.off = len(r.b) }

func (r *rbuf) u8() uint8 {
	if r.off >= len(r.b) {
		r.fail()
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *rbuf) uvar() uint64 {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail()
		return 0
	}
	r.off += n
	return v
}

func (r *rbuf) ivar() int64 {
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail()
		return 0
	}
	r.off += n
	return v
}

func (r *rbuf) num() int {
	v := r.ivar()
	if v > math.MaxInt32 || v < math.MinInt32 {
		r.fail()
		return 0
	}
	return int(v)
}

func (r *rbuf) raw() []byte {
	n := r.uvar()
	if n > uint64(len(r.b)-r.off) {
		r.fail()
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *rbuf) str() string { return string(r.raw()) }

func (r *rbuf) f64() float64 {
	if len(r.b)-r.off < 8 {
		r.fail()
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return v
}

func (r *rbuf) boolean() bool {
	switch r.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail()
	return false
}

func (r *rbuf) optStr() *string {
	if !r.boolean() {
		return nil
	}
	s := r.str()
	return &s
}

// count reads a list length; every element takes at least one byte, so a
// length beyond the remaining input is corrupt (and cannot force a huge
// allocation).
func (r *rbuf) count() int {
	n := r.uvar()
	if n > uint64(len(r.b)-r.off) {
		r.fail()
		return 0
	}
	return int(n)
}
