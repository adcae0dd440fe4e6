package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// saveFile fills leader with n puts and saves a snapshot file.
func saveFile(t *testing.T, leader *Store, prefix string, n int) ([]byte, SnapshotInfo) {
	t.Helper()
	ctx := testCtx(t)
	for i := range n {
		if _, _, err := leader.Apply(ctx, cmdKVPut, wrapperspb.String(fmt.Sprintf("%s%03d=v%d", prefix, i, i))); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	info, err := leader.SaveSnapshot(ctx, &buf, SaveOptions{SystemID: "sys", Version: "test"})
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	return buf.Bytes(), info
}

func TestBackup_SaveInspectRestoreAcrossClusters(t *testing.T) {
	src := newTestCluster(t, 3)
	srcLeader := src.requireOneLeader(t, src.stores)
	file, saved := saveFile(t, srcLeader, "a", 40)
	want := src.kvOf(srcLeader).snapshotMap()

	info, err := InspectSnapshot(bytes.NewReader(file))
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if info.Index != saved.Index || info.Term != saved.Term || info.FileVersion != 1 || info.FormatVersion != 1 ||
		info.SystemID != "sys" || info.Version != "test" || info.NodeID != srcLeader.ID() || info.Created.IsZero() {
		t.Fatalf("inspect = %+v, saved %+v", info, saved)
	}
	if len(info.Modules) != 1 || info.Modules[0].Name != "kv" || info.Modules[0].Records != len(want) {
		t.Fatalf("modules = %+v, want kv with %d records", info.Modules, len(want))
	}

	// A follower refuses: the node service forwards to the leader.
	dst := newTestCluster(t, 3)
	dstLeader := dst.requireOneLeader(t, dst.stores)
	saveFile(t, dstLeader, "old", 5) // state the restore must replace
	for _, s := range dst.stores {
		if s != dstLeader {
			if _, _, err := s.RestoreSnapshot(testCtx(t), bytes.NewReader(file)); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("restore on follower: %v, want ErrNotLeader", err)
			}
			if _, err := s.SaveSnapshot(testCtx(t), io.Discard, SaveOptions{}); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("save on follower: %v, want ErrNotLeader", err)
			}
			break
		}
	}
	got, idx, err := dstLeader.RestoreSnapshot(testCtx(t), bytes.NewReader(file))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got.Index != saved.Index || got.Modules[0].Records != len(want) {
		t.Fatalf("restore info = %+v", got)
	}
	for i, s := range dst.stores {
		eventually(t, waitTimeout, func() error {
			if s.AppliedIndex() < idx {
				return fmt.Errorf("%s applied %d of %d", s.ID(), s.AppliedIndex(), idx)
			}
			if m := dst.kvs[i].snapshotMap(); !maps.Equal(m, want) {
				return fmt.Errorf("%s holds %d keys, want %d", s.ID(), len(m), len(want))
			}
			return nil
		})
	}
	// Writes go on after the restore, on top of the restored state.
	if _, _, err := dstLeader.Apply(testCtx(t), cmdKVPut, wrapperspb.String("after=1")); err != nil {
		t.Fatalf("apply after restore: %v", err)
	}
}

func TestBackup_BadFilesChangeNothing(t *testing.T) {
	c := newTestCluster(t, 1)
	leader := c.stores[0]
	good, _ := saveFile(t, leader, "k", 10)
	before := c.kvs[0].snapshotMap()
	applied := leader.AppliedIndex()

	flip := func(off int) []byte { b := bytes.Clone(good); b[off] ^= 0x40; return b }
	version := func(v uint16) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint16(b[8:], v)
		return b
	}
	tests := []struct {
		name string
		file []byte
		want error
	}{
		{"empty", nil, ErrCorruptSnapshotFile},
		{"magic only", []byte("CNCDSNAP"), ErrCorruptSnapshotFile},
		{"short garbage", []byte("xy"), ErrCorruptSnapshotFile},
		{"not a snapshot", []byte("hello, this is not a snapshot file at all"), ErrCorruptSnapshotFile},
		{"future file version", version(2), ErrUnsupportedVersion},
		{"file version zero", version(0), ErrUnsupportedVersion},
		{"truncated", good[:len(good)-40], ErrCorruptSnapshotFile},
		{"missing checksum", good[:len(good)-32], ErrCorruptSnapshotFile},
		{"flipped byte in stream", flip(len(good) - 60), ErrCorruptSnapshotFile},
		{"flipped checksum", flip(len(good) - 1), ErrCorruptSnapshotFile},
		{"trailing data", append(bytes.Clone(good), 0), ErrCorruptSnapshotFile},
		{"future stream format", withStreamFormat(t, good, 7), ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := InspectSnapshot(bytes.NewReader(tt.file)); !errors.Is(err, tt.want) {
				t.Fatalf("inspect: %v, want %v", err, tt.want)
			}
			_, _, err := leader.RestoreSnapshot(testCtx(t), bytes.NewReader(tt.file))
			if !errors.Is(err, tt.want) {
				t.Fatalf("restore: %v, want %v", err, tt.want)
			}
			if got := c.kvs[0].snapshotMap(); !maps.Equal(got, before) || leader.AppliedIndex() != applied {
				t.Fatalf("state changed by a refused restore")
			}
		})
	}
}

// withStreamFormat rewrites the FSM stream's format version inside a
// snapshot file and re-frames it with a valid checksum, as a newer binary
// would write it.
func withStreamFormat(t *testing.T, file []byte, format uint32) []byte {
	t.Helper()
	var out []byte
	_, err := readSnapshotFile(bytes.NewReader(file), func(hdr *concordv1.SnapshotFileHeader, stream io.Reader) error {
		var raw bytes.Buffer
		if _, err := raw.ReadFrom(stream); err != nil {
			return err
		}
		rewritten := rewriteHeader(t, raw.Bytes(), func(h *concordv1.SnapshotHeader) { h.FormatVersion = format })
		hdr.Size = int64(len(rewritten))
		var buf bytes.Buffer
		if err := writeSnapshotFile(&buf, hdr, bytes.NewReader(rewritten)); err != nil {
			return err
		}
		out = buf.Bytes()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
