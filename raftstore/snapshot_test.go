package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// persistFSM snapshots f into a memSink and returns it.
func persistFSM(t *testing.T, f *fsm) *memSink {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v, want closed only", sink.closed, sink.cancelled)
	}
	return sink
}

// fillFSM applies n puts and n list adds to f through hand-built logs.
func fillFSM(f *fsm, n int) {
	idx := f.applied.Load()
	for i := range n {
		idx++
		f.Apply(cmdLog(idx, encode(cmdKVPut, put(fmt.Sprintf("k%03d=v%d", i%50, i)))))
		idx++
		f.Apply(cmdLog(idx, encode(cmdLogAdd, put(fmt.Sprintf("item%d", i)))))
	}
}

func TestSnapshot_RoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 200} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			src, _, _ := newTestFSM(t)
			fillFSM(src, n)
			sink := persistFSM(t, src)

			// Apply more after the snapshot: it must not leak into it.
			fillFSM(src, 3)

			dst, dstKV, dstList := newTestFSM(t)
			if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
				t.Fatalf("restore: %v", err)
			}
			ref, refKV, refList := newTestFSM(t)
			fillFSM(ref, n)
			if !maps.Equal(dstKV.snapshotMap(), refKV.snapshotMap()) {
				t.Fatal("kv state differs after restore")
			}
			if !slices.Equal(dstList.list(), refList.list()) {
				t.Fatal("list state differs after restore")
			}
			if dst.applied.Load() != uint64(2*n) || dst.appliedTerm.Load() != ref.appliedTerm.Load() {
				t.Fatalf("restored position %d/%d, want %d", dst.applied.Load(), dst.appliedTerm.Load(), 2*n)
			}
			if dstKV.restores != 1 {
				t.Fatalf("kv committed %d times", dstKV.restores)
			}
		})
	}
}

func TestSnapshot_RestoreFailureLeavesStateUntouched(t *testing.T) {
	src, _, _ := newTestFSM(t)
	fillFSM(src, 20)
	good := persistFSM(t, src).Bytes()

	tests := []struct {
		name  string
		setup func(kv *kvModule) []byte
		want  error
	}{
		{"module restore fails", func(kv *kvModule) []byte { kv.failRestore = true; return good }, nil},
		{"truncated stream", func(*kvModule) []byte { return good[:len(good)-7] }, ErrBadSnapshot},
		{"trailing garbage", func(*kvModule) []byte { return append(slices.Clone(good), 1, 2, 3) }, ErrBadSnapshot},
		{"unknown module", func(*kvModule) []byte {
			return rewriteHeader(t, good, func(h *concordv1.SnapshotHeader) { h.Modules = append(h.Modules, "ghost") })
		}, ErrBadSnapshot},
		{"bad version", func(*kvModule) []byte {
			return rewriteHeader(t, good, func(h *concordv1.SnapshotHeader) { h.FormatVersion = 9 })
		}, ErrBadSnapshot},
		{"modules swapped", func(*kvModule) []byte {
			return rewriteHeader(t, good, func(h *concordv1.SnapshotHeader) { slices.Reverse(h.Modules) })
		}, ErrBadSnapshot},
		{"empty stream", func(*kvModule) []byte { return nil }, ErrBadSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live, kv, list := newTestFSM(t)
			fillFSM(live, 5)
			beforeKV, beforeList, beforeIdx := kv.snapshotMap(), list.list(), live.applied.Load()
			rc := &closeRecorder{Reader: bytes.NewReader(tt.setup(kv))}
			err := live.Restore(rc)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("restore err %v, want %v", err, tt.want)
			}
			if !rc.closed {
				t.Fatal("restore did not close the reader")
			}
			if !maps.Equal(kv.snapshotMap(), beforeKV) || !slices.Equal(list.list(), beforeList) || kv.restores != 0 {
				t.Fatal("failed restore changed live state")
			}
			if live.applied.Load() != beforeIdx {
				t.Fatal("failed restore moved the applied index")
			}
		})
	}
}

func TestSnapshot_ModuleMissingFromSnapshotStartsEmpty(t *testing.T) {
	// A snapshot written by a binary with only the kv module.
	kvOnly := newKV()
	old, err := newFSM([]Module{kvOnly}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	old.Apply(cmdLog(1, encode(cmdKVPut, put("a=1"))))
	data := persistFSM(t, old).Bytes()

	f, kv, list := newTestFSM(t)
	f.Apply(cmdLog(1, encode(cmdLogAdd, put("stale"))))
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if v, _ := kv.get("a"); v != "1" || len(list.list()) != 0 {
		t.Fatalf("kv a=%q list=%v, want a=1 and an empty list", v, list.list())
	}
}

func TestSnapshot_ModuleLeavingRecordsUnreadFails(t *testing.T) {
	src, _, _ := newTestFSM(t)
	fillFSM(src, 3)
	data := persistFSM(t, src).Bytes()
	lazy := &tableModule{name: "kv"}
	f, err := newFSM([]Module{&lazyModule{tableModule: lazy}, &listModule{}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = f.Restore(io.NopCloser(bytes.NewReader(data)))
	if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "did not read all") {
		t.Fatalf("err %v", err)
	}
}

func TestSnapshot_PersistFailureCancelsSink(t *testing.T) {
	tests := []struct {
		name  string
		setup func(kv *kvModule, sink *memSink)
	}{
		{"module persist fails", func(kv *kvModule, _ *memSink) { kv.failPersist = true }},
		{"sink write fails", func(_ *kvModule, sink *memSink) { sink.failAfter = 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, kv, _ := newTestFSM(t)
			fillFSM(f, 5000) // large enough to overflow the write buffer
			sink := &memSink{}
			tt.setup(kv, sink)
			snap, err := f.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer snap.Release()
			if err := snap.Persist(sink); err == nil {
				t.Fatal("persist succeeded")
			}
			if !sink.cancelled || sink.closed {
				t.Fatalf("sink closed=%v cancelled=%v, want cancelled only", sink.closed, sink.cancelled)
			}
		})
	}
}

func TestSnapshot_CaptureFailure(t *testing.T) {
	f, kv, _ := newTestFSM(t)
	kv.failSnapshot = true
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("snapshot succeeded although a module refused")
	}
}

// rewriteHeader decodes the header of a snapshot stream, edits it, and
// re-frames the stream with the rest unchanged.
func rewriteHeader(t *testing.T, data []byte, edit func(*concordv1.SnapshotHeader)) []byte {
	t.Helper()
	r := bytes.NewReader(data)
	var h concordv1.SnapshotHeader
	if err := protodelim.UnmarshalFrom(r, &h); err != nil {
		t.Fatal(err)
	}
	rest := data[len(data)-r.Len():]
	edit(&h)
	var out bytes.Buffer
	if _, err := protodelim.MarshalTo(&out, &h); err != nil {
		t.Fatal(err)
	}
	out.Write(rest)
	return out.Bytes()
}

// closeRecorder is an io.ReadCloser that remembers Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// lazyModule reads one record and stops.
type lazyModule struct{ *tableModule }

func (m *lazyModule) Restore(next func() ([]byte, error)) (func(), error) {
	_, err := next()
	return func() {}, err
}
