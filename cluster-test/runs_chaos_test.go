//go:build chaos

package clustertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Long replicated-run scenarios, built only with -tags chaos (make chaos).

// TestChaos_RunsLeaderKilledInEveryPhaseOfOneRun kills the leader in every
// phase of the same run (initial, debate, final vote, report), restarting
// the killed node before the next kill, three runs in a row: each run
// still ends with the undisturbed result and nobody eliminated.
func TestChaos_RunsLeaderKilledInEveryPhaseOfOneRun(t *testing.T) {
	c := New(t, 3)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	agents := startRunAgents(t, c, runParticipants, []int{0, 1, 2}, scriptAgents(script, gate))
	obs := newRunsObserver(t, nodeURLs(c, 0))
	for r := range 3 {
		rr := newRunRequest(t, fmt.Sprintf("req-chaos-every-phase-%d", r), runParticipants[r], runTaskTimeoutMs)
		gate.arm(killPhases[0].phase)
		runID := obs.start(t, rr)
		for k, kp := range killPhases {
			if k > 0 {
				gate.arm(kp.phase) // releases the previous phase's tasks
			}
			held := gate.waitHeld(t, kp.tasks)
			obs.requirePhase(t, runID, kp.phase)
			l := c.Leader(t)
			t.Logf("run %d, %s: kill the leader %s", r, kp.phase, l)
			killed := time.Now()
			c.Kill(t, l.Index)
			requireResent(t, agents, held, killed)
			c.Restart(t, l.Index)
		}
		gate.open()
		requireUndisturbedOutcome(t, obs.waitDone(t, runID), rr, script)
		requireRunReplicated(t, runID, clusterReaders(t, c)...)
	}
	c.RequireInvariants(t)
}

// TestChaos_RunsRandomFaults runs ten debates, each hit by one random
// fault in a random phase: the leader killed, a follower killed, or the
// leader isolated for a while. Every run ends with the undisturbed result.
func TestChaos_RunsRandomFaults(t *testing.T) {
	c := New(t, 3)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	startRunAgents(t, c, runParticipants, []int{0, 1, 2}, scriptAgents(script, gate))
	obs := newRunsObserver(t, nodeURLs(c, 0))
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	for r := range 10 {
		kp := killPhases[rng.IntN(len(killPhases))]
		rr := newRunRequest(t, fmt.Sprintf("req-chaos-random-%d", r), runParticipants[rng.IntN(3)], runTaskTimeoutMs)
		gate.arm(kp.phase)
		runID := obs.start(t, rr)
		gate.waitHeld(t, kp.tasks)
		l := c.Leader(t)
		switch fault := rng.IntN(3); fault {
		case 0:
			t.Logf("run %d, %s: kill the leader %s", r, kp.phase, l)
			c.Kill(t, l.Index)
			gate.open()
			requireUndisturbedOutcome(t, obs.waitDone(t, runID), rr, script)
			c.Restart(t, l.Index)
		case 1:
			f := c.Followers(t)[rng.IntN(2)]
			t.Logf("run %d, %s: kill the follower %s", r, kp.phase, f)
			c.Kill(t, f.Index)
			gate.open()
			requireUndisturbedOutcome(t, obs.waitDone(t, runID), rr, script)
			c.Restart(t, f.Index)
		default:
			t.Logf("run %d, %s: isolate the leader %s", r, kp.phase, l)
			c.Net.Isolate(l.ID)
			gate.open()
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond) // the fault lasts a while
			c.Net.Heal()
			requireUndisturbedOutcome(t, obs.waitDone(t, runID), rr, script)
		}
		requireRunReplicated(t, runID, clusterReaders(t, c)...)
	}
	c.RequireInvariants(t)
}

// TestChaos_RunsProcessKill9 is the leader kill with real processes: three
// `concord server` processes, the leader kill -9'd while the debate's
// tasks are outstanding, then restarted.
func TestChaos_RunsProcessKill9(t *testing.T) {
	pc := StartProcs(t, 3)
	var urls []string
	for _, p := range pc.Procs() {
		urls = append(urls, p.MAPURL())
	}
	rotate := func(k int) []string { return append(append([]string(nil), urls[k:]...), urls[:k]...) }
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	agents := map[string]*runAgent{}
	for k, id := range runParticipants {
		agents[id] = startRunAgent(t, id, rotate(k), scriptAgents(script, gate))
	}
	obs := newRunsObserver(t, urls)
	for r, kp := range killPhases {
		rr := newRunRequest(t, fmt.Sprintf("req-chaos-kill9-%d", r), "carol", runTaskTimeoutMs)
		gate.arm(kp.phase)
		runID := obs.start(t, rr)
		held := gate.waitHeld(t, kp.tasks)
		l := pc.Leader(t)
		t.Logf("%s: kill -9 the leader %s", kp.phase, l)
		killed := time.Now()
		pc.Kill9(t, l.Index)
		requireResent(t, agents, held, killed)
		gate.open()
		requireUndisturbedOutcome(t, obs.waitDone(t, runID), rr, script)
		pc.Restart(t, l.Index)
		var readers []*Client
		for _, p := range pc.Running() {
			readers = append(readers, pc.Connect(t, p.Index, map[string]any{"participantType": "client"}))
		}
		requireRunReplicated(t, runID, readers...)
	}
}

// TestChaos_RunsPinnedAgentsNodeRestarts gives each agent a single server
// URL (`concord agent --server ws://one-node`) and kills and restarts
// those nodes, one after the other, ten times while the debate's tasks are
// outstanding. Each time the agent must resume its own session on its
// restarted node (reconnected, same session id): a fresh session would
// leave the old one attached to that node with no connection. Then the run
// finishes with the undisturbed result.
func TestChaos_RunsPinnedAgentsNodeRestarts(t *testing.T) {
	c := New(t, 3)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	var agents []*runAgent
	for k, id := range runParticipants {
		agents = append(agents, startRunAgent(t, id, []string{c.Node(k).MAPURL()}, scriptAgents(script, gate)))
	}
	requireAgentsEverywhere(t, c, runParticipants...)
	obs := newRunsObserver(t, nodeURLs(c, 0))
	rr := newRunRequest(t, "req-chaos-pinned", "alice", runTaskTimeoutMs)
	gate.arm("debate")
	runID := obs.start(t, rr)
	gate.waitHeld(t, 3)
	for i := range 10 {
		k := i % 3
		a := agents[k]
		before, seen := a.client.Session().SessionID, len(a.reconnected())
		t.Logf("restart %d: kill %s (agent %s, session %s)", i, c.Node(k), a.id, before)
		c.Kill(t, k)
		time.Sleep(time.Duration(100*(i%5)) * time.Millisecond) // down for a while: the agent's reconnect backoff grows
		c.Restart(t, k)
		Eventually(t, ConvergeTimeout, func() error {
			if len(a.reconnected()) <= seen {
				return fmt.Errorf("agent %s has not reconnected to %s", a.id, c.Node(k))
			}
			return nil
		})
		if rc := a.reconnected()[seen]; !rc.Resumed || rc.SessionID != before {
			t.Fatalf("restart %d: agent %s reconnected to %s with session %s (resumed %v), want its session %s resumed",
				i, a.id, c.Node(k), rc.SessionID, rc.Resumed, before)
		}
		c.Leader(t)
	}
	gate.open()
	requireUndisturbedOutcome(t, obs.waitDone(t, runID), rr, script)
	requireRunReplicated(t, runID, clusterReaders(t, c)...)
	c.RequireInvariants(t)
}
