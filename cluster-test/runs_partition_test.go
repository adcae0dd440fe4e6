package clustertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/argueclient"
)

// runPauseWindow is how long a partitioned run is watched for progress it
// must not make: several election timeouts, so that a majority that could
// carry on would have done so.
var runPauseWindow = 4 * RaftElection

// TestRuns_LeaderIsolatedMidRun isolates the leader (a minority of one)
// while the debate's tasks are outstanding. carol is connected to the
// isolated node: her connection stays up, but her reply cannot be
// committed and the majority's new leader cannot reach her, so the round
// cannot close and the run pauses (alice's and bob's answers are
// committed by the majority meanwhile). After the heal her reply goes
// through, the run finishes with the undisturbed result and nobody
// eliminated, and every replica serves the same run.
func TestRuns_LeaderIsolatedMidRun(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	f := c.Followers(t)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	agents := startRunAgents(t, c, runParticipants, []int{f[0].Index, f[1].Index, l.Index}, scriptAgents(script, gate))
	obs := newRunsObserver(t, []string{f[0].MAPURL(), f[1].MAPURL()}) // reads the majority's replica

	rr := newRunRequest(t, "req-isolated-leader", "alice", runTaskTimeoutMs)
	gate.arm("debate")
	runID := obs.start(t, rr)
	held := gate.waitHeld(t, 3)
	obs.requirePhase(t, runID, "debate")
	t.Logf("debate tasks held (%v): isolate the leader %s", held, l)
	c.Net.Isolate(l.ID)
	gate.open()

	majority := c.LeaderAmong(t, f...)
	t.Logf("majority leader %s", majority)
	debate := func(r *argueclient.RunInfo) runEvents { return summariseEvents(t, r.Events) }
	info := obs.waitRun(t, runID, runDoneTimeout, func(r *argueclient.RunInfo) error {
		ev := debate(r)
		if ev.responded["debate/1/alice"] != 1 || ev.responded["debate/1/bob"] != 1 {
			return fmt.Errorf("alice's and bob's debate answers not committed yet: %v", ev.responded)
		}
		return nil
	}, "events")
	paused := len(info.Events)
	consistently(t, runPauseWindow, func() error {
		r, err := obs.get(runID, "events")
		if err != nil {
			return err
		}
		if r.Status != argueclient.StatusRunning || r.Phase != "debate" || r.Round != 1 || len(r.Events) != paused {
			return fmt.Errorf("the run moved on while carol is cut off: %s, phase %s round %d, %d events (paused at %d)",
				r.Status, r.Phase, r.Round, len(r.Events), paused)
		}
		return nil
	})
	if n := debate(info).responded["debate/1/carol"]; n != 0 {
		t.Fatalf("carol's reply committed %d times while her node was isolated", n)
	}

	c.Net.Heal()
	healed := time.Now()
	done := obs.waitDone(t, runID)
	t.Logf("run resumed and finished %v after the heal", time.Since(healed).Round(time.Millisecond))
	requireUndisturbedOutcome(t, done, rr, script)
	if rc := agents["carol"].reconnected(); len(rc) > 0 {
		t.Logf("carol reconnected %d times: %+v", len(rc), rc)
	}
	requireRunReplicated(t, runID, clusterReaders(t, c)...)
	c.RequireInvariants(t)
}
