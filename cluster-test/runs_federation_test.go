package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/argueclient"
	"github.com/concordmap/concord/node/rpc"
)

// Debates across systems (federation.md §5, issue 11): a run homed in dc1
// whose participants are alice of dc1 and bob and carol of dc2. The home
// leader's driver sends dc2's tasks over the link to {system:"dc2", agent};
// their answers come back to "dc1:agent:concord.runs" over dc2's link and
// are committed in dc1's log. Each fault lands while the debate tasks are
// held by the agents, and the run must end with the undisturbed result,
// nobody eliminated.

// fedParticipants are the debaters: the home system's alice and two
// agents of dc2.
var fedParticipants = []string{"alice", "dc2:agent:bob", "dc2:agent:carol"}

// fedDebate is two linked systems with the debaters connected.
type fedDebate struct {
	dc1, dc2 *Cluster
	agents   map[string]*runAgent // by participant id
	gate     *phaseGate
	obs      *runsObserver
}

// newFedDebate starts dc1 and dc2 (twoSystems), alice on a dc1 follower
// and bob and carol on the two dc2 servers that dc1's leader's stream is
// not connected to, each failing over within its own system.
func newFedDebate(t *testing.T) *fedDebate {
	t.Helper()
	dc1, dc2 := twoSystems(t)
	l := dc1.Leader(t)
	holder := linkServer(t, l, dc2)
	f := &fedDebate{dc1: dc1, dc2: dc2, gate: &phaseGate{}, agents: map[string]*runAgent{}}
	t.Cleanup(f.gate.open)
	h := scriptAgents(personaScript(nil), f.gate)
	f.agents["alice"] = startRunAgent(t, "alice", nodeURLs(dc1, dc1.Followers(t)[0].Index), h)
	f.agents["dc2:agent:bob"] = startRunAgent(t, "bob", nodeURLs(dc2, (holder+1)%3), h)
	f.agents["dc2:agent:carol"] = startRunAgent(t, "carol", nodeURLs(dc2, (holder+2)%3), h)
	requireAgentsEverywhere(t, dc1, "alice")
	requireAgentsEverywhere(t, dc2, "bob", "carol")
	waitImported(t, dc1, "dc2", "bob", "carol")
	f.obs = newRunsObserver(t, nodeURLs(dc1, l.Index))
	return f
}

// debate runs one debate with fault injected while its debate-phase tasks
// are held, and checks the undisturbed outcome.
func (f *fedDebate) debate(t *testing.T, name string, fault func(t *testing.T)) {
	t.Helper()
	rr := newRunRequestOf(t, "req-fed-"+name, "dc2:agent:bob", runTaskTimeoutMs, fedParticipants)
	f.gate.arm("debate")
	runID := f.obs.start(t, rr)
	held := f.gate.waitHeld(t, len(fedParticipants))
	f.obs.requirePhase(t, runID, "debate")
	fault(t)
	f.gate.open()
	info := f.obs.waitDone(t, runID)
	requireUndisturbedOutcome(t, info, rr, personaScript(nil))
	t.Logf("%s: run %s finished with the undisturbed result; held %v", name, runID, held)
}

// TestRuns_FederatedDebate runs debates across two systems: undisturbed
// (with the start checks and the result files), then with the home
// leader, the dc2 server holding the home leader's stream (where tasks
// enter dc2), the dc1 server holding a dc2 agent node's stream (where
// answers enter dc1) and a remote agent's node each killed mid-debate, and
// with the link between the systems cut for less than the round timeout.
// Also: the start checks, a forged answer, and a remote participant that
// cannot be reached (eliminated for timeout, like a local one).
func TestRuns_FederatedDebate(t *testing.T) {
	f := newFedDebate(t)
	dc1, dc2 := f.dc1, f.dc2

	t.Run("undisturbed", func(t *testing.T) {
		f.debate(t, "plain", func(*testing.T) {})
		info := f.obs.waitDone(t, mustLastRun(t, f.obs))
		oc, err := info.Outcome(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		summary, err := os.ReadFile(filepath.Join(oc.Dir, "summary.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range fedParticipants {
			if !strings.Contains(string(summary), id) {
				t.Fatalf("summary.md does not name %s:\n%s", id, summary)
			}
		}
	})

	t.Run("start checks", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		for _, tc := range []struct {
			agents []string
			code   int
			text   string
		}{
			{[]string{"alice", "dc2:agent:nobody"}, rpc.CodeAgentNotFound, "not in the directory imported from dc2"},
			{[]string{"alice", "dc9:agent:x"}, rpc.CodeFederationSystemNotFound, "no link to dc9"},
		} {
			rr := newRunRequestOf(t, "req-fed-bad", "alice", runTaskTimeoutMs, tc.agents)
			_, err := f.obs.runs.Start(ctx, rr.raw, rr.id)
			requireMAPCode(t, fmt.Sprint(tc.agents), err, tc.code)
			if !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("start %v: %v, want it to say %q", tc.agents, err, tc.text)
			}
		}
		// dc1 exports only role "public": carol of dc1 is unknown in dc2.
		agentOn(t, dc1, 0, "carol", nil)
		obs2 := newRunsObserver(t, nodeURLs(dc2, 0))
		rr := newRunRequestOf(t, "req-fed-unexported", "bob", runTaskTimeoutMs, []string{"bob", "dc1:agent:carol"})
		_, err := obs2.runs.Start(ctx, rr.raw, rr.id)
		requireMAPCode(t, "unexported dc1 agent", err, rpc.CodeAgentNotFound)
		// Refusals store nothing: dc1 holds the one run so far, dc2 none.
		for _, c := range []struct {
			o    *runsObserver
			want int
		}{{f.obs, 1}, {obs2, 0}} {
			runs, _, err := c.o.runs.List(ctx, "", 10, "")
			if err != nil || len(runs) != c.want {
				t.Fatalf("runs after refused starts: %d (%v), want %d", len(runs), err, c.want)
			}
		}
	})

	t.Run("remote reply forged locally", func(t *testing.T) {
		// A local agent registered under the remote participant's id
		// cannot answer its task: only dc2's bob over the link can.
		rr := newRunRequestOf(t, "req-fed-forge", "alice", runTaskTimeoutMs, fedParticipants)
		f.gate.arm("initial")
		runID := f.obs.start(t, rr)
		task := ""
		for _, id := range f.gate.waitHeld(t, len(fedParticipants)) {
			if strings.HasSuffix(id, "/dc2:agent:bob") {
				task = id
			}
		}
		forger := agentOn(t, dc1, 1, "dc2:agent:bob", nil)
		_, err := forger.Send(map[string]any{"to": "concord.runs", "payload": map[string]any{"kind": "error", "error": "forged"},
			"meta": map[string]any{"correlationId": task, "isResult": true}})
		requireMAPCode(t, "forged remote reply", err, rpc.CodePermissionDenied)
		f.gate.open()
		requireUndisturbedOutcome(t, f.obs.waitDone(t, runID), rr, personaScript(nil))
	})

	t.Run("remote participant unreachable", func(t *testing.T) {
		// eve of dc2 is registered (and imported by dc1) but her
		// connection is gone: dc2 refuses every delivery, the driver
		// retries until her task's timer fires, and she is eliminated
		// like a local agent would be; the others finish the run.
		eve := agentOn(t, dc2, 0, "eve", nil)
		waitImported(t, dc1, "dc2", "bob", "carol", "eve")
		eve.Close()
		rr := newRunRequestOf(t, "req-fed-unreachable", "alice", 3000, []string{"alice", "dc2:agent:bob", "dc2:agent:eve"})
		runID := f.obs.start(t, rr)
		info := f.obs.waitDone(t, runID)
		if info.Status != argueclient.StatusFinished {
			t.Fatalf("run ended %s (%+v), want finished without eve", info.Status, info.Error)
		}
		var why []string
		for _, e := range info.Eliminations {
			why = append(why, e.ParticipantID+":"+e.Reason)
		}
		if fmt.Sprint(why) != "[dc2:agent:eve:timeout]" {
			t.Fatalf("eliminations %v, want only dc2:agent:eve for timeout", why)
		}
	})

	t.Run("home leader killed", func(t *testing.T) {
		f.debate(t, "home-leader", func(t *testing.T) {
			l := dc1.Leader(t)
			t.Logf("kill dc1's leader %s", l)
			dc1.Kill(t, l.Index)
			t.Cleanup(func() { dc1.Restart(t, l.Index) })
		})
	})

	t.Run("stream holder killed", func(t *testing.T) {
		f.debate(t, "stream-holder", func(t *testing.T) {
			l := dc1.Leader(t)
			holder := linkServer(t, l, dc2)
			t.Logf("kill %s, the dc2 server %s's stream is connected to", dc2.Node(holder), l)
			dc2.Kill(t, holder)
			t.Cleanup(func() { dc2.Restart(t, holder) })
		})
	})

	t.Run("reply stream holder killed", func(t *testing.T) {
		// The answers of dc2's agents enter dc1 through the dc1 server
		// their node's stream is connected to; kill it (a follower when one
		// of the two agents' streams lands on one).
		f.debate(t, "reply-stream-holder", func(t *testing.T) {
			l := dc1.Leader(t)
			victim := -1
			for _, id := range []string{"bob", "carol"} {
				a, ok := dc2.Running()[0].Server().Registry().Agent(id)
				n := dc2.NodeByID(a.HomeNode)
				if !ok || n == nil || n.Server() == nil {
					continue
				}
				if h := linkServer(t, n, dc1); victim < 0 || h != l.Index {
					victim = h
				}
			}
			if victim < 0 {
				t.Fatal("no dc2 agent node with a stream to dc1")
			}
			t.Logf("kill %s, where dc2's agents' answers enter dc1 (leader %s)", dc1.Node(victim), l)
			dc1.Kill(t, victim)
			t.Cleanup(func() { dc1.Restart(t, victim) })
		})
	})

	t.Run("remote agent node killed", func(t *testing.T) {
		f.debate(t, "agent-node", func(t *testing.T) {
			a, ok := dc2.Running()[0].Server().Registry().Agent("carol")
			if !ok {
				t.Fatal("carol is not registered in dc2")
			}
			n := dc2.NodeByID(a.HomeNode)
			if n == nil {
				t.Fatalf("carol's home node %q is not a dc2 node", a.HomeNode)
			}
			t.Logf("kill %s, carol's node", n)
			dc2.Kill(t, n.Index)
			t.Cleanup(func() { dc2.Restart(t, n.Index) })
		})
	})

	t.Run("link cut shorter than the round timeout", func(t *testing.T) {
		f.debate(t, "link-cut", func(t *testing.T) {
			dc1.Net.Partition(dc1.NodeIDs(), dc2.NodeIDs())
			Eventually(t, 10*time.Second, func() error {
				for _, st := range dc1.Running()[0].Server().Federation().Status() {
					if st.GetState() == "up" {
						return fmt.Errorf("link still up")
					}
				}
				return nil
			})
			t.Logf("link cut: the agents answer now, dc2's answers wait for the link")
			f.gate.open()
			time.Sleep(2 * time.Second) // the length of the cut is the scenario
			dc1.Net.Heal()
		})
	})
	dc1.RequireInvariants(t)
	dc2.RequireInvariants(t)
}

// mustLastRun is the newest run the observer's node lists.
func mustLastRun(t *testing.T, o *runsObserver) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	runs, _, err := o.runs.List(ctx, "", 1, "")
	if err != nil || len(runs) == 0 {
		t.Fatalf("list runs: %v %v", runs, err)
	}
	return runs[0].RunID
}
