package raftstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// Decoding AppendEntries without reflection. raft's NetworkTransport
// decodes every request with go-msgpack, which walks the request and each
// entry by reflection: with ~100 entries per paced append that was a tenth
// of a non-voter's CPU (DESIGN.md, "Eighth round"). decodeAppendEntries
// reads the same bytes, written by any raft version's encoder (old or new
// time format, fields in any order, unknown fields skipped), into the same
// values; TestAppendDecode_SameAsRaft compares it with go-msgpack and
// FuzzAppendDecode checks that it refuses what go-msgpack would not decode
// the same way, and never panics. Nothing on the wire changes.

// Bounds on what a request may claim. A length is honoured only as the
// bytes actually arrive (readBytes grows its buffer as it reads), so a
// lying length costs at most what the peer sends.
const (
	maxDecodeBytes = maxRecord // one byte string: no larger entry can be stored
	maxDecodeDepth = 32        // nesting of skipped unknown values
	decodeChunk    = 64 << 10  // readBytes allocates at most this ahead of the data
	entrySlab      = 1024      // entries allocated together
	maxKeyLen      = 32        // longer map keys are no field's: skipped unread
)

var errDecode = errors.New("decode append entries")

// decodeError wraps what went wrong.
func decodeError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errDecode, fmt.Sprintf(format, args...))
}

// msgpack format bytes used below (the msgpack specification).
const (
	mpNil      = 0xc0
	mpFalse    = 0xc2
	mpTrue     = 0xc3
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
	mpExt8     = 0xc7
	mpExt16    = 0xc8
	mpExt32    = 0xc9
	mpFloat32  = 0xca
	mpFloat64  = 0xcb
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpFixExt1  = 0xd4
	mpFixExt16 = 0xd8
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpMap16    = 0xde
	mpMap32    = 0xdf
)

// mpDecoder reads msgpack values from a buffered stream; it never reads
// past the value it decodes, so raft's codec can go on from there (the
// other RPC types, a snapshot's data).
type mpDecoder struct {
	r *bufio.Reader
}

// minDecodeBuffer is the smallest reader buffer decodeAppendEntries
// works with: keys and times are peeked in place.
const minDecodeBuffer = 64

// decodeAppendEntries reads one request into req (which must be zero)
// from r, whose buffer holds at least minDecodeBuffer bytes.
func decodeAppendEntries(r *bufio.Reader, req *raft.AppendEntriesRequest) error {
	if r.Size() < minDecodeBuffer {
		return decodeError("reader buffer of %d bytes, want %d", r.Size(), minDecodeBuffer)
	}
	d := mpDecoder{r: r}
	n, isNil, err := d.mapHeader()
	if err != nil || isNil {
		return err
	}
	for range n {
		k, err := d.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "ProtocolVersion":
			var v int64
			v, err = d.int()
			req.ProtocolVersion = raft.ProtocolVersion(v)
		case "ID":
			req.ID, err = d.bytes()
		case "Addr":
			req.Addr, err = d.bytes()
		case "Term":
			req.Term, err = d.uint()
		case "Leader":
			req.Leader, err = d.bytes()
		case "PrevLogEntry":
			req.PrevLogEntry, err = d.uint()
		case "PrevLogTerm":
			req.PrevLogTerm, err = d.uint()
		case "Entries":
			req.Entries, err = d.entries()
		case "LeaderCommitIndex":
			req.LeaderCommitIndex, err = d.uint()
		default:
			err = d.skip(0)
		}
		if err != nil {
			return fmt.Errorf("%w (field %q)", err, k)
		}
	}
	return nil
}

// entries reads an array of log entries. The entries are allocated
// entrySlab at a time, never more than the array's remaining length.
func (d *mpDecoder) entries() ([]*raft.Log, error) {
	n, isNil, err := d.arrayHeader()
	if err != nil || isNil {
		return nil, err
	}
	out := make([]*raft.Log, 0, min(n, entrySlab))
	var slab []raft.Log
	for i := range n {
		if len(slab) == 0 {
			slab = make([]raft.Log, min(n-i, entrySlab))
		}
		l := &slab[0]
		slab = slab[1:]
		if err := d.entry(l); err != nil {
			return nil, fmt.Errorf("%w (entry %d)", err, i)
		}
		out = append(out, l)
	}
	return out, nil
}

// entry reads one raft.Log into l.
func (d *mpDecoder) entry(l *raft.Log) error {
	n, isNil, err := d.mapHeader()
	if err != nil {
		return err
	}
	if isNil {
		return decodeError("nil entry")
	}
	for range n {
		k, err := d.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "Index":
			l.Index, err = d.uint()
		case "Term":
			l.Term, err = d.uint()
		case "Type":
			var v uint64
			if v, err = d.uint(); err == nil && v > math.MaxUint8 {
				err = decodeError("log type %d overflows", v)
			}
			l.Type = raft.LogType(v)
		case "Data":
			l.Data, err = d.bytes()
		case "Extensions":
			l.Extensions, err = d.bytes()
		case "AppendedAt":
			l.AppendedAt, err = d.time()
		default:
			err = d.skip(0)
		}
		if err != nil {
			return fmt.Errorf("%w (field %q)", err, k)
		}
	}
	return nil
}

// readByte reads one byte; a stream that ends inside a value is
// io.ErrUnexpectedEOF.
func (d *mpDecoder) readByte() (byte, error) {
	b, err := d.r.ReadByte()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return b, err
}

// fixed reads n (at most 8) bytes as a big-endian unsigned number.
func (d *mpDecoder) fixed(n int) (uint64, error) {
	p, err := d.r.Peek(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	var v uint64
	for _, b := range p {
		v = v<<8 | uint64(b)
	}
	_, _ = d.r.Discard(n)
	return v, nil
}

// mapHeader reads a map's length; isNil reports a msgpack nil instead.
func (d *mpDecoder) mapHeader() (n int, isNil bool, err error) {
	c, err := d.readByte()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), false, nil
	case c == mpMap16:
		v, err := d.fixed(2)
		return int(v), false, err
	case c == mpMap32:
		v, err := d.fixed(4)
		return int(v), false, err
	case c == mpNil:
		return 0, true, nil
	}
	return 0, false, decodeError("want a map, got format 0x%02x", c)
}

// arrayHeader reads an array's length; isNil reports a msgpack nil.
func (d *mpDecoder) arrayHeader() (n int, isNil bool, err error) {
	c, err := d.readByte()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c >= 0x90 && c <= 0x9f:
		return int(c & 0x0f), false, nil
	case c == mpArray16:
		v, err := d.fixed(2)
		return int(v), false, err
	case c == mpArray32:
		v, err := d.fixed(4)
		return int(v), false, err
	case c == mpNil:
		return 0, true, nil
	}
	return 0, false, decodeError("want an array, got format 0x%02x", c)
}

// strHeader reads the length of a str or bin value; isNil reports nil.
func (d *mpDecoder) strHeader() (n int, isNil bool, err error) {
	c, err := d.readByte()
	if err != nil {
		return 0, false, err
	}
	var v uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		return int(c & 0x1f), false, nil
	case c == mpStr8 || c == mpBin8:
		v, err = d.fixed(1)
	case c == mpStr16 || c == mpBin16:
		v, err = d.fixed(2)
	case c == mpStr32 || c == mpBin32:
		v, err = d.fixed(4)
	case c == mpNil:
		return 0, true, nil
	default:
		return 0, false, decodeError("want a string, got format 0x%02x", c)
	}
	if err == nil && v > maxDecodeBytes {
		err = decodeError("string of %d bytes", v)
	}
	return int(v), false, err
}

// key reads a map key (a str). The bytes returned are the reader's own
// and valid until its next read; a key longer than any field's is
// skipped and returned empty (no field has it).
func (d *mpDecoder) key() ([]byte, error) {
	n, isNil, err := d.strHeader()
	if err != nil {
		return nil, err
	}
	if isNil || n == 0 {
		return nil, decodeError("nil or empty map key") // go-msgpack fails on them too
	}
	if n > maxKeyLen {
		return nil, d.discard(n)
	}
	k, err := d.r.Peek(n)
	if err != nil {
		return nil, unexpected(err)
	}
	_, _ = d.r.Discard(n)
	return k, nil
}

// bytes reads a str or bin value as go-msgpack decodes it into a []byte:
// nil for nil, an empty non-nil slice for an empty string.
func (d *mpDecoder) bytes() ([]byte, error) {
	n, isNil, err := d.strHeader()
	if err != nil || isNil {
		return nil, err
	}
	return d.readBytes(n)
}

// readBytes reads n bytes into a new slice, allocating no more than
// decodeChunk ahead of what has arrived.
func (d *mpDecoder) readBytes(n int) ([]byte, error) {
	if n <= decodeChunk || n <= d.r.Buffered() {
		b := make([]byte, n)
		if _, err := io.ReadFull(d.r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, decodeChunk)
	for len(b) < n {
		k := min(n-len(b), decodeChunk)
		b = append(b, make([]byte, k)...)
		if _, err := io.ReadFull(d.r, b[len(b)-k:]); err != nil {
			return nil, unexpected(err)
		}
	}
	return b, nil
}

// uint reads an unsigned integer in any msgpack integer format; nil is 0.
func (d *mpDecoder) uint() (uint64, error) {
	c, err := d.readByte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xe0:
		return 0, decodeError("negative value for an unsigned field")
	case c == mpNil:
		return 0, nil
	case c >= mpUint8 && c <= mpUint64:
		return d.fixed(1 << (c - mpUint8))
	case c >= mpInt8 && c <= mpInt64:
		v, err := d.signed(c)
		if err == nil && v < 0 {
			err = decodeError("negative value for an unsigned field")
		}
		return uint64(v), err
	}
	return 0, decodeError("want an integer, got format 0x%02x", c)
}

// int reads a signed integer in any msgpack integer format; nil is 0.
func (d *mpDecoder) int() (int64, error) {
	c, err := d.readByte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c == mpNil:
		return 0, nil
	case c >= mpUint8 && c <= mpUint64:
		v, err := d.fixed(1 << (c - mpUint8))
		if err == nil && v > math.MaxInt64 {
			err = decodeError("integer %d overflows", v)
		}
		return int64(v), err
	case c >= mpInt8 && c <= mpInt64:
		return d.signed(c)
	}
	return 0, decodeError("want an integer, got format 0x%02x", c)
}

// signed reads the body of an int8..int64 whose format byte was c.
func (d *mpDecoder) signed(c byte) (int64, error) {
	size := 1 << (c - mpInt8)
	v, err := d.fixed(size)
	if err != nil {
		return 0, err
	}
	shift := 64 - 8*size
	return int64(v<<shift) >> shift, nil // sign-extend
}

// time reads raft's AppendedAt as go-msgpack does: the body of a msgpack
// timestamp (4, 8 or 12 bytes; raft's new time format writes it as a
// string, msgpack's extension -1 carries it too), or, in a short string,
// the bytes of time.MarshalBinary (the old format, raft's default); nil
// is the zero time.
func (d *mpDecoder) time() (time.Time, error) {
	c, err := d.r.Peek(1)
	if err != nil {
		return time.Time{}, unexpected(err)
	}
	var size int
	switch c := c[0]; {
	case c == mpNil:
		_, _ = d.r.Discard(1)
		return time.Time{}, nil
	case c == mpFixExt1+2 || c == mpFixExt1+3: // fixext4, fixext8
		_, _ = d.r.Discard(1)
		if typ, err := d.readByte(); err != nil || int8(typ) != -1 {
			return time.Time{}, orDecodeError(err, "extension type %d where a time was expected", int8(typ))
		}
		size = 4 << (c - mpFixExt1 - 2)
	case c == mpExt8:
		_, _ = d.r.Discard(1)
		n, err := d.readByte()
		if err != nil || n != 12 {
			return time.Time{}, orDecodeError(err, "time extension of %d bytes", n)
		}
		if typ, err := d.readByte(); err != nil || int8(typ) != -1 {
			return time.Time{}, orDecodeError(err, "extension type %d where a time was expected", int8(typ))
		}
		size = 12
	default:
		fixstr := c >= 0xa0 && c <= 0xbf
		n, isNil, err := d.strHeader()
		if err != nil || isNil {
			return time.Time{}, err
		}
		if n > 32 {
			return time.Time{}, decodeError("time of %d bytes", n)
		}
		b, err := d.r.Peek(n)
		if err != nil {
			return time.Time{}, unexpected(err)
		}
		_, _ = d.r.Discard(n)
		if fixstr {
			var t time.Time
			if t.UnmarshalBinary(b) == nil {
				return t, nil
			}
		}
		return timestamp(b)
	}
	b, err := d.r.Peek(size)
	if err != nil {
		return time.Time{}, unexpected(err)
	}
	_, _ = d.r.Discard(size)
	return timestamp(b)
}

// timestamp decodes the body of a msgpack timestamp.
func timestamp(b []byte) (time.Time, error) {
	switch len(b) {
	case 4:
		return time.Unix(int64(binary.BigEndian.Uint32(b)), 0).UTC(), nil
	case 8:
		v := binary.BigEndian.Uint64(b)
		return time.Unix(int64(v&(1<<34-1)), int64(v>>34)).UTC(), nil
	case 12:
		return time.Unix(int64(binary.BigEndian.Uint64(b[4:])), int64(binary.BigEndian.Uint32(b))).UTC(), nil
	}
	return time.Time{}, decodeError("time of %d bytes", len(b))
}

// orDecodeError returns err, or when nil a decode error saying what.
func orDecodeError(err error, format string, args ...any) error {
	if err != nil {
		return err
	}
	return decodeError(format, args...)
}

// skip reads past one value of any type (a field this version does not
// know), nested at most maxDecodeDepth deep.
func (d *mpDecoder) skip(depth int) error {
	if depth > maxDecodeDepth {
		return decodeError("values nested deeper than %d", maxDecodeDepth)
	}
	c, err := d.readByte()
	if err != nil {
		return err
	}
	var n uint64 // bytes to discard
	items := -1  // values to skip (an array), or pairs (a map) when map
	isMap := false
	switch {
	case c <= 0x7f || c >= 0xe0 || c == mpNil || c == mpFalse || c == mpTrue:
		return nil
	case c >= 0x80 && c <= 0x8f:
		items, isMap = int(c&0x0f), true
	case c >= 0x90 && c <= 0x9f:
		items = int(c & 0x0f)
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == mpBin8 || c == mpStr8:
		n, err = d.fixed(1)
	case c == mpBin16 || c == mpStr16:
		n, err = d.fixed(2)
	case c == mpBin32 || c == mpStr32:
		n, err = d.fixed(4)
	case c == mpExt8:
		n, err = d.fixed(1)
		n++ // the type byte
	case c == mpExt16:
		n, err = d.fixed(2)
		n++
	case c == mpExt32:
		n, err = d.fixed(4)
		n++
	case c >= mpFixExt1 && c <= mpFixExt16:
		n = 1 + 1<<(c-mpFixExt1)
	case c == mpFloat32:
		n = 4
	case c == mpFloat64:
		n = 8
	case c >= mpUint8 && c <= mpUint64:
		n = 1 << (c - mpUint8)
	case c >= mpInt8 && c <= mpInt64:
		n = 1 << (c - mpInt8)
	case c == mpArray16 || c == mpMap16:
		var v uint64
		v, err = d.fixed(2)
		items, isMap = int(v), c == mpMap16
	case c == mpArray32 || c == mpMap32:
		var v uint64
		v, err = d.fixed(4)
		items, isMap = int(v), c == mpMap32
	default:
		return decodeError("unknown format 0x%02x", c)
	}
	if err != nil {
		return err
	}
	if items < 0 {
		return d.discard(int(n))
	}
	if isMap {
		items *= 2
	}
	for range items {
		if err := d.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// discard reads past n bytes.
func (d *mpDecoder) discard(n int) error {
	_, err := d.r.Discard(n)
	return unexpected(err)
}

// unexpected reports a stream that ended inside a value as such.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
