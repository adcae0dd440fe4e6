package raftstore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func mustOpenBolt(t *testing.T, dir string) *boltStore {
	t.Helper()
	b, err := openLogStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBoltStore_Logs(t *testing.T) {
	dir := t.TempDir()
	b := mustOpenBolt(t, dir)
	if first, _ := b.FirstIndex(); first != 0 {
		t.Fatalf("empty store first index %d", first)
	}
	at := time.Unix(1700000000, 123)
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, Data: []byte{byte(i)}, Extensions: []byte("x"), AppendedAt: at})
	}
	if err := b.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := b.StoreLog(&raft.Log{Index: 11, Term: 4, Type: raft.LogNoop}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	// Reopen: everything must come from disk.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = mustOpenBolt(t, dir)
	defer func() { _ = b.Close() }()
	first, _ := b.FirstIndex()
	last, _ := b.LastIndex()
	if first != 5 || last != 11 {
		t.Fatalf("first/last %d/%d, want 5/11", first, last)
	}
	var l raft.Log
	if err := b.GetLog(3, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted entry: %v", err)
	}
	if err := b.GetLog(7, &l); err != nil {
		t.Fatal(err)
	}
	want := logs[6]
	if l.Index != 7 || l.Term != 3 || l.Type != raft.LogCommand || !bytes.Equal(l.Data, want.Data) ||
		!bytes.Equal(l.Extensions, want.Extensions) || !l.AppendedAt.Equal(at) {
		t.Fatalf("got %+v, want %+v", l, *want)
	}
	if err := b.GetLog(11, &l); err != nil || l.Type != raft.LogNoop || l.Data != nil || !l.AppendedAt.IsZero() {
		t.Fatalf("noop entry %+v, %v", l, err)
	}
}

func TestBoltStore_Stable(t *testing.T) {
	b := mustOpenBolt(t, t.TempDir())
	defer func() { _ = b.Close() }()
	// raft compares this error's text with "not found".
	if _, err := b.Get([]byte("missing")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := b.GetUint64([]byte("missing")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing uint64 key: %v", err)
	}
	if err := b.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("get %q %v", v, err)
	}
	if err := b.SetUint64([]byte("term"), 42); err != nil {
		t.Fatal(err)
	}
	if v, err := b.GetUint64([]byte("term")); err != nil || v != 42 {
		t.Fatalf("get uint64 %d %v", v, err)
	}
	if _, err := b.GetUint64([]byte("k")); err == nil {
		t.Fatal("GetUint64 of a 1-byte value succeeded")
	}
}

func TestDecodeLog_Rejects(t *testing.T) {
	good := encodeLog(&raft.Log{Term: 1, Type: raft.LogCommand, Data: []byte("abc")})
	tests := map[string][]byte{
		"empty":         nil,
		"wrong version": append([]byte{9}, good[1:]...),
		"truncated":     good[:len(good)-2],
		"trailing":      append(append([]byte(nil), good...), 0),
		"huge length":   {1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			var l raft.Log
			if err := decodeLog(data, &l); err == nil {
				t.Fatalf("decoded %+v", l)
			}
		})
	}
}

// FuzzDecodeLog: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to the same bytes.
func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(&raft.Log{Term: 7, Type: raft.LogCommand, Data: []byte{1, 2}, Extensions: []byte("e"), AppendedAt: time.Unix(5, 6)}))
	f.Add(encodeLog(&raft.Log{}))
	f.Add([]byte{1, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var l raft.Log
		if err := decodeLog(data, &l); err != nil {
			return
		}
		if again := encodeLog(&l); !bytes.Equal(again, data) {
			// Non-minimal varints decode fine but re-encode shorter.
			var l2 raft.Log
			if err := decodeLog(again, &l2); err != nil || l2.Term != l.Term || !bytes.Equal(l2.Data, l.Data) {
				t.Fatalf("re-encode mismatch: %x -> %+v -> %x", data, l, again)
			}
		}
	})
}
