//go:build linux

package clustertest

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// wireFrom is the last build whose leader sent AppendEntries through
// raft's own transport encoding, before raftstore's appendSender
// (CONCORD_WIRE_FROM overrides it).
const wireFrom = "be534b6"

// TestProcs_NewLeaderOldFollowers runs the mixed-version case the rolling
// upgrade does not reach: a leader on the current binary replicating to
// followers on the build before appendSender, under writes, one of them
// restarted (old build) so that it must catch up from the new leader.
//
// Leadership is handed to the upgraded server by construction, not by
// luck: the old build has no targeted transfer, and its graceful stop
// hands leadership to the follower raft finds most up to date, ties going
// to the first in the configuration (raft's pickServer). So the server
// upgraded is the first follower in the configuration, and the leader is
// stopped while the writers are paused and every log is level: the tie
// is certain.
//
// Every acknowledged write must then be on every node. The writers'
// agents belong to system participants with the orphan disconnect
// policy: neither a session's detach nor its node's failure removes
// them, so a missing one is a lost write.
func TestProcs_NewLeaderOldFollowers(t *testing.T) {
	from := wireFrom
	if v := os.Getenv("CONCORD_WIRE_FROM"); v != "" {
		from = v
	}
	oldBin := ConcordBinaryAt(t, from)
	newBin := ConcordBinary(t)
	pc := StartProcs(t, 3, WithProcBinary(oldBin))

	old := pc.Leader(t)
	upgraded, third := followersInRaftOrder(t, pc, old)
	// The writer goes through the follower nobody restarts (its writes
	// are forwarded to whoever leads): the stopped leader holds no
	// session whose detach would be a write racing the transfer.
	w := startProcWriterVia(t, pc, "up-", third)
	defer w.stop()
	w.waitProgress(t, 10)
	pc.Upgrade(t, upgraded.Index, newBin)
	requireProcBinary(t, upgraded, newBin)
	w.waitProgress(t, 10)

	resume := w.pause(t)
	level := waitLevelLogs(t, pc)
	pc.Stop(t, old.Index) // graceful: hands leadership to a follower
	if l := pc.Leader(t); l != upgraded {
		t.Fatalf("leadership went to %s, not to the upgraded %s (first follower in the configuration, logs level): %s",
			l, upgraded, raftSummary(pc))
	}
	term := raftTerm(t, pc, upgraded)
	t.Logf("leadership handed from %s to the upgraded %s, term %d (%d writes so far)", old, upgraded, term, w.acked())
	resume()
	// The new leader's quorum is the old-build follower alone while the
	// old leader is down: it falls behind, then catches up on restart.
	direct := startProcWriterVia(t, pc, "lead-", upgraded)
	defer direct.stop()
	w.waitProgress(t, 100)
	direct.waitProgress(t, 100)
	t.Logf("restarting %s on %s %d entries behind the leader", old, from, raftLastIndex(t, pc, upgraded)-level)
	pc.Restart(t, old.Index) // the same old build, behind the new leader
	w.waitProgress(t, 150)
	direct.waitProgress(t, 150)
	acked := append(w.stop(), direct.stop()...)
	slices.Sort(acked)

	if l := pc.Leader(t); l != upgraded || raftTerm(t, pc, upgraded) != term {
		t.Fatalf("leadership left the upgraded %s (term %d) during the writes: %s", upgraded, term, raftSummary(pc))
	}
	requireProcAgents(t, pc, acked)
	t.Logf("leader on the current build, followers on %s: %d acknowledged writes on every node (%s)", from, len(acked), raftSummary(pc))
}

// followersInRaftOrder returns the leader's two followers in the order of
// the Raft configuration.
func followersInRaftOrder(t *testing.T, pc *ProcCluster, leader *Proc) (first, second *Proc) {
	t.Helper()
	st, err := pc.Status(leader.Index)
	if err != nil {
		t.Fatalf("status of %s: %v", leader, err)
	}
	var followers []*Proc
	for _, m := range raftServerID.FindAllStringSubmatch(st.Raft["latest_configuration"], -1) {
		for _, p := range pc.Procs() {
			if p.ID == m[1] && p != leader {
				followers = append(followers, p)
			}
		}
	}
	if len(followers) != 2 {
		t.Fatalf("the Raft configuration of %s does not name two followers: %q", leader, st.Raft["latest_configuration"])
	}
	return followers[0], followers[1]
}

// raftServerID picks the server ids out of raft's latest_configuration
// statistic, in order ("[{Suffrage:Voter ID:p1 Address:...} ...]").
var raftServerID = regexp.MustCompile(`ID:(\S+) Address:`)

// waitLevelLogs waits until every running process has the same last log
// index, all of it committed on the leader, and the same again at the
// next look: nothing in flight, so the leader's view of each follower
// (raft's nextIndex) is the same. It returns that index.
func waitLevelLogs(t *testing.T, pc *ProcCluster) uint64 {
	t.Helper()
	prev := ""
	Eventually(t, ConvergeTimeout, func() error {
		var last, commit string
		for _, p := range pc.Running() {
			st, err := pc.Status(p.Index)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if last != "" && st.Raft["last_log_index"] != last {
				prev = ""
				return fmt.Errorf("logs not level: %s", raftSummary(pc))
			}
			last = st.Raft["last_log_index"]
			if st.Raft["state"] == "Leader" {
				commit = st.Raft["commit_index"]
			}
		}
		if commit != last {
			prev = ""
			return fmt.Errorf("leader commit %q, last log %q", commit, last)
		}
		if last != prev {
			prev = last
			return fmt.Errorf("last log %s, looking again", last)
		}
		return nil
	})
	level, err := strconv.ParseUint(prev, 10, 64)
	if err != nil {
		t.Fatalf("last log index %q: %v", prev, err)
	}
	return level
}

// raftTerm returns process p's current Raft term.
func raftTerm(t *testing.T, pc *ProcCluster, p *Proc) uint64 {
	t.Helper()
	return raftStat(t, pc, p, "term")
}

// raftLastIndex returns the index of the last entry in p's Raft log.
func raftLastIndex(t *testing.T, pc *ProcCluster, p *Proc) uint64 {
	t.Helper()
	return raftStat(t, pc, p, "last_log_index")
}

// raftStat returns one of p's numeric Raft statistics.
func raftStat(t *testing.T, pc *ProcCluster, p *Proc, key string) uint64 {
	t.Helper()
	st, err := pc.Status(p.Index)
	if err != nil {
		t.Fatalf("status of %s: %v", p, err)
	}
	v, err := strconv.ParseUint(st.Raft[key], 10, 64)
	if err != nil {
		t.Fatalf("%s of %s: %q: %v", key, p, st.Raft[key], err)
	}
	return v
}

// raftSummary lists each running process's Raft state, term, last log
// index and applied index, for failure messages and logs.
func raftSummary(pc *ProcCluster) string {
	out := ""
	for _, p := range pc.Running() {
		st, err := pc.Status(p.Index)
		if err != nil {
			out += fmt.Sprintf("%s: %v; ", p.ID, err)
			continue
		}
		out += fmt.Sprintf("%s %s term %s last %s applied %s; ", p.ID, st.Raft["state"], st.Raft["term"], st.Raft["last_log_index"], st.Raft["fsm_applied_index"])
	}
	return out
}

// requireProcBinary checks that process p runs bin (its /proc exe link).
func requireProcBinary(t *testing.T, p *Proc, bin string) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", procPID(p)))
	if err != nil {
		t.Fatalf("binary of %s: %v", p, err)
	}
	if exe != bin {
		t.Fatalf("%s runs %s, want %s", p, exe, bin)
	}
}
