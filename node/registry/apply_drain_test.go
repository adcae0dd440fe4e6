package registry

import (
	"errors"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

const (
	cDrainAdmit   = concordv1.CommandType_COMMAND_TYPE_DRAIN_ADMIT
	cDrainRelease = concordv1.CommandType_COMMAND_TYPE_DRAIN_RELEASE
)

func drainAdmit(node string, at, expires int64, basedOn uint64) *concordv1.DrainAdmit {
	return &concordv1.DrainAdmit{Meta: metaAt(at), NodeId: node, LeaderTerm: 7, BasedOnIndex: basedOn, ExpiresAtMs: expires}
}

// admitted is the node ids of s's recorded admissions, in order.
func admitted(s *State) []string {
	adm, _ := s.DrainAdmissions()
	var out []string
	for _, a := range adm {
		out = append(out, a.NodeID)
	}
	return out
}

// A DRAIN_ADMIT is recorded only when it quotes the last admission's
// index; a second admission of a node replaces its first; expiry is judged
// by the command's timestamp, and a release removes only the admission it
// names. The admissions survive a snapshot round trip.
func TestDrainAdmit_DecidedInOrderExpiresAndReleases(t *testing.T) {
	h := newHarness(t, 10)
	if adm, idx := h.s.DrainAdmissions(); len(adm) != 0 || idx != 0 {
		t.Fatalf("fresh state: %v at %d, want none at 0", adm, idx)
	}
	h.must(cDrainAdmit, drainAdmit("n2", 1_000, 61_000, 0))
	_, idx := h.s.DrainAdmissions()
	if idx != h.index {
		t.Fatalf("last admission index %d, want %d", idx, h.index)
	}
	// A leader that decided before n2's admission was applied.
	before := dump(h.s)
	if _, err := h.apply(cDrainAdmit, drainAdmit("n3", 1_100, 61_100, 0)); !errors.Is(err, ErrDrainAdmitStale) {
		t.Fatalf("admission based on a stale set: %v, want ErrDrainAdmitStale", err)
	}
	if dump(h.s) != before {
		t.Fatal("the refused admission changed the state")
	}
	for _, bad := range []*concordv1.DrainAdmit{drainAdmit("", 1_100, 61_100, idx), drainAdmit("n3", 1_100, 1_100, idx)} {
		if _, err := h.apply(cDrainAdmit, bad); !errors.Is(err, ErrInvalidParams) {
			t.Fatalf("admission %v: %v, want ErrInvalidParams", bad, err)
		}
	}
	h.must(cDrainAdmit, drainAdmit("n3", 1_200, 30_000, idx))
	n3 := h.index
	if got := admitted(h.s); len(got) != 2 || got[0] != "n2" || got[1] != "n3" {
		t.Fatalf("admitted %v, want [n2 n3]", got)
	}
	// At 40s n3's admission (until 30s) has expired: the next one drops it.
	h.must(cDrainAdmit, drainAdmit("n4", 40_000, 100_000, n3))
	if got := admitted(h.s); len(got) != 2 || got[0] != "n2" || got[1] != "n4" {
		t.Fatalf("admitted %v after n3's expiry, want [n2 n4]", got)
	}
	n4 := h.index
	// n2 asked again: its new admission replaces the first, and a release
	// naming the first leaves it.
	h.must(cDrainAdmit, drainAdmit("n2", 41_000, 101_000, n4))
	n2 := h.index
	h.must(cDrainRelease, &concordv1.DrainRelease{Meta: metaAt(42_000), NodeId: "n2", AdmittedIndex: 1})
	h.must(cDrainRelease, &concordv1.DrainRelease{Meta: metaAt(42_000), NodeId: "gone", AdmittedIndex: 1})
	if got := admitted(h.s); len(got) != 2 {
		t.Fatalf("admitted %v after stale releases, want [n2 n4]", got)
	}
	dst := newHarness(t, 10)
	commit, err := dst.s.Restore(reader(snapshotBytes(t, h.s)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if dump(dst.s) != dump(h.s) {
		t.Fatalf("restored state differs:\n%s\n%s", dump(dst.s), dump(h.s))
	}
	h.must(cDrainRelease, &concordv1.DrainRelease{Meta: metaAt(43_000), NodeId: "n2", AdmittedIndex: n2})
	if got := admitted(h.s); len(got) != 1 || got[0] != "n4" {
		t.Fatalf("admitted %v after n2's release, want [n4]", got)
	}
	// A release does not move the index admissions quote.
	if _, idx := h.s.DrainAdmissions(); idx != n2 {
		t.Fatalf("last admission index %d after a release, want %d", idx, n2)
	}
}

// testdata/snapshot-5c9a2b5-nodrains.bin is a registry snapshot written by
// the build before drain admissions (commit 5c9a2b5: a scope, a session,
// its agent and the system FSM level FSMLevelSystemRecord recorded;
// records length-prefixed with a uvarint). It restores with no admissions,
// and the state goes on taking them.
func TestDrainAdmit_OldSnapshotWithoutAdmissions(t *testing.T) {
	h := restoreFixture(t, "snapshot-5c9a2b5-nodrains.bin")
	if _, ok := h.s.Agent("agent-a"); !ok {
		t.Fatal("agent-a missing after restoring the old snapshot")
	}
	if got := h.s.SystemFSMLevel(); got != FSMLevelSystemRecord {
		t.Fatalf("old snapshot restored with level %d, want %d", got, FSMLevelSystemRecord)
	}
	if adm, idx := h.s.DrainAdmissions(); len(adm) != 0 || idx != 0 {
		t.Fatalf("old snapshot restored with admissions %v at %d, want none at 0", adm, idx)
	}
	h.must(cSystemLevel, levelRecord(FSMLevelDrainAdmissions))
	h.must(cDrainAdmit, drainAdmit("n2", 1_000, 61_000, 0))
	if got := admitted(h.s); len(got) != 1 || got[0] != "n2" {
		t.Fatalf("admitted %v after the old snapshot, want [n2]", got)
	}
}
