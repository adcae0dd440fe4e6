package clustertest

import (
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/argueclient"
)

// Replicated consensus runs (issue 5) through node failures: the leader
// killed in each phase of a debate, and the node an agent is connected to
// killed mid-round. The agents are the real agentbridge with the
// deterministic persona script; the verdict is the result of the same
// script run undisturbed in process (consensus.Simulate).

// killPhases are the phases a leader is killed in, with how many tasks the
// phase has outstanding (every participant's round task; the
// representative's report task).
var killPhases = []struct {
	phase string
	tasks int
}{
	{"initial", 3},
	{"debate", 3},
	{"final_vote", 3},
	{"report", 1},
}

// TestRuns_LeaderKilledInEachPhase kills the Raft leader while the tasks of
// one phase are outstanding (held by the agents), once per phase, each on
// a fresh run: the new leader's driver re-sends every outstanding task
// (checked before the agents answer; the agent whose node died gets it
// once it has failed over), the run finishes, and its result is the
// undisturbed one with nobody eliminated. The killed node then comes
// back and its replica serves the same run byte for byte.
func TestRuns_LeaderKilledInEachPhase(t *testing.T) {
	c := New(t, 3)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	agents := startRunAgents(t, c, runParticipants, []int{0, 1, 2}, scriptAgents(script, gate))
	obs := newRunsObserver(t, nodeURLs(c, 0))
	for _, tc := range killPhases {
		t.Run(tc.phase, func(t *testing.T) {
			rr := newRunRequest(t, "req-kill-"+tc.phase, "carol", runTaskTimeoutMs)
			gate.arm(tc.phase)
			runID := obs.start(t, rr)
			held := gate.waitHeld(t, tc.tasks)
			obs.requirePhase(t, runID, tc.phase)
			l := c.Leader(t)
			t.Logf("%s: %d tasks held (%v): kill the leader %s", tc.phase, len(held), held, l)
			killed := time.Now()
			c.Kill(t, l.Index)
			requireResent(t, agents, held, killed)
			gate.open()
			info := obs.waitDone(t, runID)
			requireUndisturbedOutcome(t, info, rr, script)
			c.Restart(t, l.Index)
			requireRunReplicated(t, runID, clusterReaders(t, c)...)
			c.RequireInvariants(t)
		})
	}
	for id, a := range agents {
		t.Logf("agent %s: %d task messages, reconnects %+v", id, len(a.receivedSince(time.Time{})), a.reconnected())
	}
}

// TestRuns_AgentNodeKilled kills the follower an agent is connected to
// while that agent holds its debate task: the agent reconnects to another
// node with its resume token (same session, still registered), answers
// there, and the run finishes with the undisturbed result, nobody
// eliminated.
func TestRuns_AgentNodeKilled(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	f := c.Followers(t)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	agents := startRunAgents(t, c, runParticipants, []int{l.Index, f[0].Index, f[1].Index}, scriptAgents(script, gate))
	obs := newRunsObserver(t, nodeURLs(c, l.Index))
	carol := agents["carol"]
	before, ok := f[1].Server().Registry().Agent("carol")
	if !ok {
		t.Fatal("carol is not registered")
	}

	rr := newRunRequest(t, "req-agent-node", "alice", runTaskTimeoutMs)
	gate.arm("debate")
	runID := obs.start(t, rr)
	gate.waitHeld(t, 3)
	t.Logf("debate tasks held: kill %s, carol's node", f[1])
	c.Kill(t, f[1].Index)
	gate.open()
	info := obs.waitDone(t, runID)
	requireUndisturbedOutcome(t, info, rr, script)
	requireNoneOf(t, "eliminations", eliminated(info), "carol")

	rc := carol.reconnected()
	if len(rc) == 0 {
		t.Fatal("carol's connection never failed over")
	}
	if !rc[0].Resumed || rc[0].SessionID != before.SessionID {
		t.Fatalf("carol reconnected to %s with session %s (resumed %v), want her session %s resumed",
			rc[0].URL, rc[0].SessionID, rc[0].Resumed, before.SessionID)
	}
	after, ok := l.Server().Registry().Agent("carol")
	if !ok || after.SessionID != before.SessionID {
		t.Fatalf("carol after the failover: registered %v, session %s, want %s", ok, after.SessionID, before.SessionID)
	}
	c.Restart(t, f[1].Index)
	requireRunReplicated(t, runID, clusterReaders(t, c)...)
	c.RequireInvariants(t)
}

// eliminated lists the participants a run eliminated.
func eliminated(info *argueclient.RunInfo) []string {
	var out []string
	for _, e := range info.Eliminations {
		out = append(out, e.ParticipantID)
	}
	return out
}
