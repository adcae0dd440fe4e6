package raftstore

import (
	"bytes"
	"log/slog"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// InspectSnapshotKinds counts each module's records by the kind the
// caller names, in the order first seen; "" counts as unknown; without a
// namer there are no kinds, and the record counts are the same either way.
func TestInspectSnapshotKinds(t *testing.T) {
	src, err := newFSM([]Module{newKV(), &listModule{}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	fillFSM(src, 5)
	var stream bytes.Buffer
	snap, _ := src.Snapshot()
	if err := snap.(*fsmSnapshot).write(&stream); err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	hdr := &concordv1.SnapshotFileHeader{Index: 10, Term: 1, Size: int64(stream.Len())}
	if err := writeSnapshotFile(&file, hdr, bytes.NewReader(stream.Bytes())); err != nil {
		t.Fatal(err)
	}
	plain, err := InspectSnapshot(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	kinds, err := InspectSnapshotKinds(bytes.NewReader(file.Bytes()), func(module string, _ []byte) string {
		seen++
		if module == "list" {
			return ""
		}
		if seen%2 == 0 {
			return "even"
		}
		return "odd"
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Modules) != len(kinds.Modules) || len(plain.Modules) == 0 {
		t.Fatalf("modules %v vs %v", plain.Modules, kinds.Modules)
	}
	for i, m := range kinds.Modules {
		if plain.Modules[i].Kinds != nil {
			t.Errorf("module %s: kinds without a namer: %v", m.Name, plain.Modules[i].Kinds)
		}
		if m.Records != plain.Modules[i].Records {
			t.Errorf("module %s: %d records with kinds, %d without", m.Name, m.Records, plain.Modules[i].Records)
		}
		sum := 0
		for _, k := range m.Kinds {
			sum += k.Records
			if m.Name == "list" && k.Kind != "unknown" {
				t.Errorf("list record named %q, want unknown", k.Kind)
			}
		}
		if sum != m.Records {
			t.Errorf("module %s: kinds %v add up to %d of %d", m.Name, m.Kinds, sum, m.Records)
		}
	}
}
