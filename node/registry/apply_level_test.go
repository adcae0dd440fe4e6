package registry

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

const cSystemLevel = concordv1.CommandType_COMMAND_TYPE_SYSTEM_FSM_LEVEL

func levelRecord(l uint32) *concordv1.SystemFSMLevel {
	return &concordv1.SystemFSMLevel{Meta: meta(), Level: l}
}

// The recorded level only grows, and survives a snapshot round trip.
func TestSystemFSMLevel_RecordGrowsAndSnapshots(t *testing.T) {
	h := newHarness(t, 10)
	if got := h.s.SystemFSMLevel(); got != 0 {
		t.Fatalf("fresh state records level %d, want 0", got)
	}
	h.must(cSystemLevel, levelRecord(FSMLevelSystemRecord))
	h.must(cSystemLevel, levelRecord(FSMLevelResumeEpoch)) // a stale, lower proposal
	if got := h.s.SystemFSMLevel(); got != FSMLevelSystemRecord {
		t.Fatalf("recorded level %d after a lower record, want %d", got, FSMLevelSystemRecord)
	}
	// Once every server advertises a newer level the leader records it
	// (cluster.levelToRecord); the record moves up to it.
	h.must(cSystemLevel, levelRecord(FSMLevelModuleSessionWrites))
	if got := h.s.SystemFSMLevel(); got != FSMLevelModuleSessionWrites {
		t.Fatalf("recorded level %d after the newer record, want %d", got, FSMLevelModuleSessionWrites)
	}
	dst := newHarness(t, 10)
	commit, err := dst.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if got := dst.s.SystemFSMLevel(); got != FSMLevelModuleSessionWrites {
		t.Fatalf("restored level %d, want %d", got, FSMLevelModuleSessionWrites)
	}
}

// A build of the level before FSMLevelModuleSessionWrites (it knows the
// record, not the module writes' epochs) halts on a record of that level
// rather than applying those writes without their check.
func TestSystemFSMLevel_PreviousBuildHaltsOnModuleSessionWrites(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BuildFSMLevel = FSMLevelModuleSessionWrites - 1
	older, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: older}
	h.must(cSystemLevel, levelRecord(FSMLevelModuleSessionWrites-1))
	if _, err := h.apply(cSystemLevel, levelRecord(FSMLevelModuleSessionWrites)); !errors.Is(err, raftstore.ErrHalt) || !errors.Is(err, ErrFSMLevelAhead) {
		t.Fatalf("record of FSMLevelModuleSessionWrites on the build before it: %v, want ErrHalt and ErrFSMLevelAhead", err)
	}
	if got := older.SystemFSMLevel(); got != FSMLevelModuleSessionWrites-1 {
		t.Fatalf("recorded level %d after the halting record, want %d", got, FSMLevelModuleSessionWrites-1)
	}
}

// A build whose level is below the recorded one halts (raftstore.ErrHalt)
// on the record, leaving its state as it was, and refuses a snapshot
// holding it.
func TestSystemFSMLevel_LowerBuildHalts(t *testing.T) {
	newer := newHarness(t, 10)
	newer.must(cSystemLevel, levelRecord(FSMLevelSystemRecord))

	cfg := DefaultConfig()
	cfg.BuildFSMLevel = FSMLevelSystemRecord - 1
	older, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: older}
	h.must(cScopeCreate, scope("kept"))
	before := dump(older)
	_, err = h.apply(cSystemLevel, levelRecord(FSMLevelSystemRecord))
	if !errors.Is(err, raftstore.ErrHalt) || !errors.Is(err, ErrFSMLevelAhead) {
		t.Fatalf("record above the build: %v, want ErrHalt and ErrFSMLevelAhead", err)
	}
	if older.SystemFSMLevel() != 0 || dump(older) != before {
		t.Fatal("the halting record changed the state")
	}
	if _, err := older.Restore(reader(snapshotBytes(t, newer.s))); !errors.Is(err, raftstore.ErrHalt) {
		t.Fatalf("restore of a snapshot recording a higher level: %v, want ErrHalt", err)
	}
	for _, bad := range []int{0, FSMLevel + 1} {
		cfg.BuildFSMLevel = bad
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("BuildFSMLevel %d: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// testdata/snapshot-9b405e9-nolevel.bin is a registry snapshot written by
// the build before the record existed (commit 9b405e9: a session, its
// agent and a scope; records length-prefixed with a uvarint). It restores
// with no level recorded, and the state goes on taking records.
func TestSystemFSMLevel_OldSnapshotWithoutLevel(t *testing.T) {
	h := restoreFixture(t, "snapshot-9b405e9-nolevel.bin")
	if _, ok := h.s.Agent("agent-a"); !ok {
		t.Fatal("agent-a missing after restoring the old snapshot")
	}
	if _, ok := h.s.Session("s-1"); !ok {
		t.Fatal("session s-1 missing after restoring the old snapshot")
	}
	if got := h.s.SystemFSMLevel(); got != 0 {
		t.Fatalf("old snapshot restored with level %d, want 0", got)
	}
	h.must(cSystemLevel, levelRecord(FSMLevelSystemRecord))
	if got := h.s.SystemFSMLevel(); got != FSMLevelSystemRecord {
		t.Fatalf("level %d after the record, want %d", got, FSMLevelSystemRecord)
	}
}

// GateLevel: below the record's level gossip alone decides; from it on,
// the record caps the level proposers rely on.
func TestGateLevel(t *testing.T) {
	tests := []struct{ advertised, recorded, want int }{
		{0, 0, 0},
		{FSMLevelResumeEpoch, 0, FSMLevelResumeEpoch},
		{FSMLevelSystemRecord, 0, FSMLevelSystemRecord - 1},
		{FSMLevelSystemRecord, FSMLevelSystemRecord, FSMLevelSystemRecord},
		{FSMLevelSystemRecord + 1, FSMLevelSystemRecord, FSMLevelSystemRecord},
		{FSMLevelResumeEpoch, FSMLevelSystemRecord, FSMLevelResumeEpoch},
		// A level above the record's waits for its own record.
		{FSMLevelModuleSessionWrites, FSMLevelSystemRecord, FSMLevelSystemRecord},
		{FSMLevelModuleSessionWrites, FSMLevelModuleSessionWrites, FSMLevelModuleSessionWrites},
	}
	for _, tt := range tests {
		if got := GateLevel(tt.advertised, tt.recorded); got != tt.want {
			t.Errorf("GateLevel(%d, %d) = %d, want %d", tt.advertised, tt.recorded, got, tt.want)
		}
	}
}

// restoreFixture restores a registry snapshot fixture from testdata
// (records length-prefixed with a uvarint) into a fresh harness.
func restoreFixture(t *testing.T, name string) *harness {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			t.Fatal("corrupt fixture")
		}
		recs = append(recs, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	h := newHarness(t, 100)
	commit, err := h.s.Restore(reader(recs))
	if err != nil {
		t.Fatalf("restore the old snapshot: %v", err)
	}
	commit()
	return h
}
