//go:build linux

package clustertest

import (
	"os"
	"testing"
)

// wireFrom is the last build whose leader sent AppendEntries through
// raft's own transport encoding, before raftstore's appendSender
// (CONCORD_WIRE_FROM overrides it).
const wireFrom = "be534b6"

// TestProcs_NewLeaderOldFollowers runs the mixed-version case the rolling
// upgrade does not reach: a leader on the current binary replicating to
// followers on the build before appendSender. A system starts on the old
// build with a writer; one follower is upgraded, and the other processes
// are restarted (still old) until the upgraded one leads. Writes must go on
// (the quorum needs an old follower to accept the new leader's appends)
// and every acknowledged write must be on every node.
func TestProcs_NewLeaderOldFollowers(t *testing.T) {
	from := wireFrom
	if v := os.Getenv("CONCORD_WIRE_FROM"); v != "" {
		from = v
	}
	oldBin := ConcordBinaryAt(t, from)
	newBin := ConcordBinary(t)
	pc := StartProcs(t, 3, WithProcBinary(oldBin))
	w := startProcWriter(t, pc)
	defer w.stop()

	leader := pc.Leader(t)
	upgraded := (leader.Index + 1) % 3
	w.waitProgress(t, 10)
	pc.Upgrade(t, upgraded, newBin)
	// A graceful stop hands leadership to a follower, not necessarily the
	// upgraded one: restart the old leader until the upgraded one leads.
	for attempt := 0; ; attempt++ {
		l := pc.Leader(t)
		if l.Index == upgraded {
			break
		}
		if attempt == 8 {
			t.Fatalf("the upgraded %s never became leader", pc.Proc(upgraded))
		}
		w.waitProgress(t, 10)
		pc.Upgrade(t, l.Index, oldBin) // a restart on the same old build
	}
	before := w.acked()
	w.waitProgress(t, 300)
	acked := w.stop()
	if l := pc.Leader(t); l.Index != upgraded {
		t.Logf("leadership moved to %s during the writes", l)
	}
	requireProcAgents(t, pc, acked)
	t.Logf("new leader, followers on %s: %d writes acknowledged while it led, %d kept in all", from, int64(len(acked))-before, len(acked))
}
