package raftstore

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// FuzzSnapshotFile feeds arbitrary bytes to the snapshot file reader (the
// operator's restore input): it must never panic, must refuse with one of
// its sentinel errors, and a check never touches live module state.
func FuzzSnapshotFile(f *testing.F) {
	src, err := newFSM([]Module{newKV(), &listModule{}}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	fillFSM(src, 5)
	var stream bytes.Buffer
	snap, _ := src.Snapshot()
	_ = snap.(*fsmSnapshot).write(&stream)
	var good bytes.Buffer
	_ = writeSnapshotFile(&good, &concordv1.SnapshotFileHeader{Index: 10, Term: 1, Size: int64(stream.Len())}, bytes.NewReader(stream.Bytes()))
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:len(good.Bytes())/2])
	f.Add([]byte("CNCDSNAP\x00\x01"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		dst, kv, _ := newTestFSM(t)
		fillFSM(dst, 2)
		before := kv.snapshotMap()
		_, err := readSnapshotFile(bytes.NewReader(data), func(_ *concordv1.SnapshotFileHeader, s io.Reader) error {
			_, err := dst.decode(s)
			return err
		})
		if err != nil && !errors.Is(err, ErrCorruptSnapshotFile) && !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if _, ierr := InspectSnapshot(bytes.NewReader(data)); (ierr == nil) != (err == nil) {
			t.Fatalf("inspect and check disagree: %v vs %v", ierr, err)
		}
		if after := kv.snapshotMap(); len(after) != len(before) {
			t.Fatal("checking a file changed live state")
		}
	})
}
