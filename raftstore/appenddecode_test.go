package raftstore

import (
	"bufio"
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// decodeRequests are the requests the decoder is checked on: raft's
// shapes (wireRequests) and what else a field can hold.
func decodeRequests() map[string]*raft.AppendEntriesRequest {
	reqs := wireRequests()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*decodeChunk/16+5) // read in chunks
	reqs["heartbeat"] = &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 7}
	reqs["zero header"] = &raft.AppendEntriesRequest{}
	reqs["empty entries"] = &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 7, Entries: []*raft.Log{}}
	reqs["edge values"] = &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: -3, ID: []byte{}, Addr: nil},
		Term:      1<<64 - 1, PrevLogEntry: 1 << 32, PrevLogTerm: 255, LeaderCommitIndex: 1<<63 + 5,
		Entries: []*raft.Log{
			{Index: 0, Term: 0, Type: 255, Data: []byte{}, Extensions: []byte{}},
			{Index: 1 << 40, Term: 70000, Type: raft.LogCommand, Data: big, AppendedAt: time.Unix(-5, 7)},
			{Index: 2, Term: 3, Data: []byte{0}, AppendedAt: time.Date(2300, 1, 1, 0, 0, 0, 999999999, time.FixedZone("x", 3600))},
			{Index: 3, Term: 3, AppendedAt: time.Unix(1<<33, 0).UTC()},
		},
	}
	return reqs
}

// encodeWith encodes v as raft's transport does, in the old time format
// (raft's default) or the new one.
func encodeWith(t testing.TB, v any, newTime bool) []byte {
	t.Helper()
	var b []byte
	if err := codec.NewEncoderBytes(&b, raftMsgpackHandle(newTime)).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b
}

// trailer follows every encoded request in these tests: both decoders
// must stop right before it.
const trailer = 0xc1

// decodeBoth decodes b with decodeAppendEntries and, unless that fails
// and onlyIfOurs is set, with raft's codec, through a reader of size
// bufSize; each must stop right before the trailer. (go-msgpack believes
// the lengths it reads, so on garbage it may try to allocate gigabytes;
// input that decodeAppendEntries took holds all the bytes it claims.)
func decodeBoth(b []byte, bufSize int, onlyIfOurs bool) (theirs, ours *raft.AppendEntriesRequest, theirErr, ourErr error) {
	in := append(append([]byte(nil), b...), trailer)
	atTrailer := func(r *bufio.Reader) error {
		if c, err := r.ReadByte(); err != nil || c != trailer {
			return fmt.Errorf("stopped elsewhere than the request's end (next %#x, %v)", c, err)
		}
		return nil
	}
	theirs, ours = new(raft.AppendEntriesRequest), new(raft.AppendEntriesRequest)
	r := bufio.NewReaderSize(bytes.NewReader(in), bufSize)
	if ourErr = decodeAppendEntries(r, ours); ourErr == nil {
		ourErr = atTrailer(r)
	}
	if ourErr != nil && onlyIfOurs {
		return nil, nil, nil, ourErr
	}
	r = bufio.NewReaderSize(bytes.NewReader(in), bufSize)
	if theirErr = codec.NewDecoder(r, &codec.MsgpackHandle{}).Decode(theirs); theirErr == nil {
		theirErr = atTrailer(r)
	}
	return theirs, ours, theirErr, ourErr
}

// decodeAppendEntries gives the very values raft's codec gives, for
// requests in either time format, through small and large buffers.
func TestAppendDecode_SameAsRaft(t *testing.T) {
	for name, req := range decodeRequests() {
		for _, newTime := range []bool{false, true} {
			for _, size := range []int{minDecodeBuffer, 256 << 10} {
				t.Run(fmt.Sprintf("%s/newtime=%v/buf=%d", name, newTime, size), func(t *testing.T) {
					theirs, ours, theirErr, ourErr := decodeBoth(encodeWith(t, req, newTime), size, false)
					if theirErr != nil || ourErr != nil {
						t.Fatalf("raft's codec: %v; ours: %v", theirErr, ourErr)
					}
					if !reflect.DeepEqual(theirs, ours) {
						t.Fatalf("decoded differently:\nraft %+v\nours %+v", theirs, ours)
					}
				})
			}
		}
	}
}

// futureRequest is an AppendEntriesRequest from a raft that added fields,
// with its fields in an order of its own.
type futureRequest struct {
	Term              uint64
	Future            map[string][]any
	Entries           []*futureLog
	LeaderCommitIndex uint64
	Zebra             float64
	raft.RPCHeader
	PrevLogEntry uint64
	PrevLogTerm  uint64
}

type futureLog struct {
	Type       raft.LogType
	Data       []byte
	Index      uint64
	Later      []int8
	Term       uint64
	AppendedAt time.Time
}

// Fields decode in whatever order they come, and fields this version
// does not know are skipped, as raft's codec does.
func TestAppendDecode_UnknownFieldsAndOrder(t *testing.T) {
	at := time.Date(2026, 12, 2, 5, 0, 0, 1, time.UTC)
	req := futureRequest{
		Term: 4, LeaderCommitIndex: 9, Zebra: 1.5, PrevLogEntry: 3, PrevLogTerm: 2,
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n2"), Addr: []byte("a:1")},
		Future:    map[string][]any{"x": {1, "two", 3.0, nil, true, []byte("b"), map[string]int{"k": -1}}},
		Entries: []*futureLog{
			{Type: raft.LogCommand, Data: []byte("d"), Index: 4, Later: []int8{-1, 2}, Term: 2, AppendedAt: at},
		},
	}
	for _, newTime := range []bool{false, true} {
		theirs, ours, theirErr, ourErr := decodeBoth(encodeWith(t, req, newTime), 4096, false)
		if theirErr != nil || ourErr != nil {
			t.Fatalf("raft's codec: %v; ours: %v", theirErr, ourErr)
		}
		if !reflect.DeepEqual(theirs, ours) {
			t.Fatalf("decoded differently:\nraft %+v\nours %+v", theirs, ours)
		}
		if ours.Term != 4 || len(ours.Entries) != 1 || string(ours.Entries[0].Data) != "d" || !ours.Entries[0].AppendedAt.Equal(at) {
			t.Fatalf("decoded %+v", ours)
		}
	}
}

// Garbage is refused with an error: cut short anywhere, or with a field
// of the wrong type.
func TestAppendDecode_RefusesGarbage(t *testing.T) {
	full := encodeWith(t, decodeRequests()["every type"], false)
	for n := range len(full) {
		r := bufio.NewReader(bytes.NewReader(full[:n]))
		if err := decodeAppendEntries(r, new(raft.AppendEntriesRequest)); err == nil {
			t.Fatalf("a request cut to %d of %d bytes decoded", n, len(full))
		}
	}
	bad := map[string][]byte{
		"not a map":        {0x93, 1, 2, 3},
		"string term":      append([]byte{0x81, 0xa4}, append([]byte("Term"), 0xa1, 'x')...),
		"negative term":    append([]byte{0x81, 0xa4}, append([]byte("Term"), 0xff)...),
		"entries a map":    append([]byte{0x81, 0xa7}, append([]byte("Entries"), 0x80)...),
		"nil entry":        append([]byte{0x81, 0xa7}, append([]byte("Entries"), 0x91, 0xc0)...),
		"type overflows":   append([]byte{0x81, 0xa7}, append([]byte("Entries"), 0x91, 0x81, 0xa4, 'T', 'y', 'p', 'e', 0xcd, 1, 0)...),
		"huge string":      append([]byte{0x81, 0xa2}, append([]byte("ID"), 0xc6, 0xff, 0xff, 0xff, 0xff)...),
		"deeply nested":    append(append([]byte{0x81, 0xa1, 'z'}, bytes.Repeat([]byte{0x91}, 100)...), 0),
		"reserved format":  {0x81, 0xa1, 'z', 0xc1},
		"bad time ext":     append([]byte{0x81, 0xa7}, append([]byte("Entries"), 0x91, 0x81, 0xaa, 'A', 'p', 'p', 'e', 'n', 'd', 'e', 'd', 'A', 't', 0xd6, 5, 0, 0, 0, 0)...),
		"bad time bytes":   append([]byte{0x81, 0xa7}, append([]byte("Entries"), 0x91, 0x81, 0xaa, 'A', 'p', 'p', 'e', 'n', 'd', 'e', 'd', 'A', 't', 0xa2, 9, 9)...),
		"claims 4G pairs":  {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'z', 0},
		"claims 4G values": append([]byte{0x81, 0xa7}, append([]byte("Entries"), 0xdd, 0xff, 0xff, 0xff, 0xff)...),
	}
	for name, b := range bad {
		t.Run(name, func(t *testing.T) {
			if err := decodeAppendEntries(bufio.NewReader(bytes.NewReader(b)), new(raft.AppendEntriesRequest)); err == nil {
				t.Fatal("decoded")
			}
		})
	}
}

// FuzzAppendDecode: any input either fails to decode, or decodes to what
// raft's codec decodes from it, stopping at the same byte; never a panic.
func FuzzAppendDecode(f *testing.F) {
	for _, req := range decodeRequests() {
		if len(req.Entries) > 5 {
			req.Entries = req.Entries[:5]
		}
		for _, e := range req.Entries {
			if len(e.Data) > 64 {
				e.Data = e.Data[:64]
			}
		}
		f.Add(encodeWith(f, req, false))
		f.Add(encodeWith(f, req, true))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		theirs, ours, theirErr, ourErr := decodeBoth(b, 64, true)
		if ourErr != nil {
			return // refusing what raft's codec takes costs a reconnect, never a wrong value
		}
		if theirErr != nil {
			t.Fatalf("decoded what raft's codec refuses (%v): %+v", theirErr, ours)
		}
		if !reflect.DeepEqual(theirs, ours) {
			t.Fatalf("decoded differently:\nraft %+v\nours %+v", theirs, ours)
		}
	})
}

// BenchmarkAppendDecode decodes one paced append to a non-voter (~300
// byte registry updates, raft's default time format) with raft's codec
// (what its NetworkTransport does) and with decodeAppendEntries.
func BenchmarkAppendDecode(b *testing.B) {
	for _, n := range []int{1, 100} {
		entries := make([]*raft.Log, n)
		at := time.Now()
		for i := range entries {
			entries[i] = &raft.Log{Index: uint64(i + 1), Term: 2, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 300), AppendedAt: at}
		}
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")},
			Term: 2, PrevLogEntry: 1, PrevLogTerm: 2, Entries: entries, LeaderCommitIndex: 1}
		enc := encodeWith(b, req, false)
		src := bytes.NewReader(enc)
		r := bufio.NewReaderSize(src, 256<<10)
		b.Run(fmt.Sprintf("codec=raft/entries=%d", n), func(b *testing.B) {
			dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(enc)
				r.Reset(src)
				var got raft.AppendEntriesRequest
				if err := dec.Decode(&got); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("codec=ours/entries=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(enc)
				r.Reset(src)
				var got raft.AppendEntriesRequest
				if err := decodeAppendEntries(r, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
