package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/agentbridge"
	"github.com/concordmap/concord/node/client/argueclient"
	"github.com/concordmap/concord/node/client/mapclient"
)

// The reply rules of replicated runs on a cluster: an agent that never
// answers is eliminated exactly once when its task times out; late and
// duplicate replies are refused (90002) and change nothing; cancel stops a
// run on every replica and refuses what comes after it.

// TestRuns_TimeoutLateDuplicateAndCancel runs alice and bob as agentbridge
// agents and carol as a bare MAP agent the test answers for (or not).
func TestRuns_TimeoutLateDuplicateAndCancel(t *testing.T) {
	c := New(t, 3)
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	answers := &answerLog{byTask: map[string]json.RawMessage{}}
	agents := startRunAgents(t, c, []string{"alice", "bob"}, []int{0, 1}, answers.wrap(scriptAgents(script, gate)))
	carol := agentOn(t, c, 2, "carol", nil)
	requireAgentsEverywhere(t, c, "carol")
	obs := newRunsObserver(t, nodeURLs(c, 0))

	t.Run("timeout", func(t *testing.T) {
		testRunTimeout(t, c, obs, agents["alice"], carol, answers, gate)
	})
	t.Run("cancel", func(t *testing.T) {
		testRunCancel(t, c, obs, agents, carol, gate)
	})
	c.RequireInvariants(t)
}

// testRunTimeout: carol never answers her initial task; its 3 s timer
// eliminates her (once). While the run goes on (the debate held by the
// gate) her late reply, alice's repeated reply and a reply to a task never
// dispatched are refused; then the run finishes without her, with the
// result the reference run gives with carol scripted to time out.
func testRunTimeout(t *testing.T, c *Cluster, obs *runsObserver, alice *runAgent, carol *Client, answers *answerLog, gate *phaseGate) {
	rr := newRunRequest(t, "req-timeout", "alice", 3000)
	gate.arm("debate")
	runID := obs.start(t, rr)
	carolTask := waitTaskMessage(t, carol, runID+"/r0/carol")
	_, err := carol.Send(replyParams(runID+"/r9/carol", roundAnswer("carol")))
	requireMAPCode(t, "a reply to a task never dispatched", err, 90002, "unknown_task")
	gate.waitHeld(t, 2)
	info := obs.waitRun(t, runID, runDoneTimeout, func(r *argueclient.RunInfo) error {
		if len(r.Eliminations) == 0 {
			return fmt.Errorf("carol not eliminated yet (phase %s round %d)", r.Phase, r.Round)
		}
		return nil
	})
	if e := info.Eliminations; len(e) != 1 || e[0].ParticipantID != "carol" || e[0].Reason != consensus.ReasonTimeout || e[0].Round != 0 {
		t.Fatalf("eliminations %+v, want carol for timeout in round 0", e)
	}

	_, err = carol.Send(replyParams(carolTask, roundAnswer("carol")))
	requireMAPCode(t, "carol's late reply", err, 90002, "already_settled")
	aliceTask := runID + "/r0/alice"
	env, ok := answers.get(aliceTask)
	if !ok {
		t.Fatalf("alice has not answered %s", aliceTask)
	}
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	_, err = alice.client.Send(ctx, mapclient.SendParams{To: mapclient.AgentAddress{Agent: "concord.runs"}, Payload: env,
		Meta: map[string]any{"isResult": true, "correlationId": aliceTask}})
	requireMAPCode(t, "alice's repeated reply", err, 90002, "already_settled")
	obs.requirePhase(t, runID, "debate")
	gate.open()

	done := obs.waitDone(t, runID)
	if done.Status != argueclient.StatusFinished || len(done.Eliminations) != 1 {
		t.Fatalf("run ended %s with eliminations %+v, want finished with carol's only", done.Status, done.Eliminations)
	}
	ev := summariseEvents(t, done.Events)
	ev.requireEachOnce(t)
	if len(ev.eliminated) != 1 || ev.eliminated[0] != "carol" {
		t.Fatalf("ParticipantEliminated events for %v, want carol once", ev.eliminated)
	}
	for k := range ev.responded {
		if strings.HasSuffix(k, "/carol") {
			t.Fatalf("carol's reply was committed: %s", k)
		}
	}
	ref := personaScript(map[string]map[string]consensus.Answer{"carol": {"initial": {Timeout: true}}})
	requireSameResult(t, done.Result, referenceResult(t, rr, ref, runID))
	requireRunReplicated(t, runID, clusterReaders(t, c)...)
}

// testRunCancel: cancel while every initial task is outstanding (alice's
// and bob's held by the gate, carol's unanswered); the replies that follow
// are refused and the run ends cancelled, once, on every replica.
func testRunCancel(t *testing.T, c *Cluster, obs *runsObserver, agents map[string]*runAgent, carol *Client, gate *phaseGate) {
	rr := newRunRequest(t, "req-cancel", "alice", runTaskTimeoutMs)
	gate.arm("initial")
	runID := obs.start(t, rr)
	gate.waitHeld(t, 2)
	carolTask := waitTaskMessage(t, carol, runID+"/r0/carol")

	// Each held task ends either cancelled by the leader's notice (no
	// reply) or, if the notice comes after the gate opens, answered and
	// refused; either way nothing is committed (checked below).
	settled := func(st agentbridge.Stats) int { return st.Handled + st.Cancelled }
	before := map[string]int{}
	for id, a := range agents {
		before[id] = settled(a.bridge.Stats())
	}
	canceller := c.Connect(t, 1, map[string]any{"participantType": "client"})
	var res struct{ Run argueclient.Summary }
	if err := canceller.CallInto(argueclient.MethodCancel, map[string]any{"runId": runID, "reason": "operator stop"}, &res); err != nil {
		t.Fatalf("cancel: %s", Describe(err))
	}
	if res.Run.Status != argueclient.StatusCancelled || res.Run.Error == nil || res.Run.Error.Code != "Cancelled" ||
		!strings.Contains(res.Run.Error.Message, "operator stop") {
		t.Fatalf("cancel answered %+v (error %+v)", res.Run, res.Run.Error)
	}
	_, err := canceller.Call(argueclient.MethodCancel, map[string]any{"runId": runID})
	requireMAPCode(t, "second cancel", err, argueclient.CodeRunFinished)
	_, err = carol.Send(replyParams(carolTask, roundAnswer("carol")))
	requireMAPCode(t, "carol's reply after cancel", err, 90002, "already_settled", "run_finished")

	gate.open()
	Eventually(t, DeliveryTimeout, func() error {
		for id, a := range agents {
			if settled(a.bridge.Stats()) <= before[id] {
				return fmt.Errorf("agent %s has not finished its cancelled task yet", id)
			}
		}
		return nil
	})
	info := obs.waitDone(t, runID)
	if info.Status != argueclient.StatusCancelled {
		t.Fatalf("run %s after cancel", info.Status)
	}
	ev := summariseEvents(t, info.Events)
	ev.requireEachOnce(t)
	if len(ev.responded) != 0 || ev.types[consensus.EventFailed] != 1 {
		t.Fatalf("after cancel: responded %v, Failed %d times", ev.responded, ev.types[consensus.EventFailed])
	}
	requireRunReplicated(t, runID, clusterReaders(t, c)...)
	st, err := obs.get(runID, "state")
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		State struct {
			OutstandingTasks []json.RawMessage `json:"outstandingTasks"`
			Timers           []json.RawMessage `json:"timers"`
		} `json:"state"`
	}
	if err := json.Unmarshal(st.Raw, &state); err != nil || len(state.State.OutstandingTasks)+len(state.State.Timers) != 0 {
		t.Fatalf("cancelled run still waits: %s (%v)", st.Raw, err)
	}
}

// answerLog records the answers a handler gave, by task id.
type answerLog struct {
	mu     sync.Mutex
	byTask map[string]json.RawMessage
}

func (l *answerLog) wrap(h agentbridge.Handler) agentbridge.Handler {
	return agentbridge.HandlerFunc(func(ctx context.Context, task *agentbridge.Task) (json.RawMessage, error) {
		env, err := h.Handle(ctx, task)
		if err == nil {
			l.mu.Lock()
			l.byTask[task.ID] = env
			l.mu.Unlock()
		}
		return env, err
	})
}

func (l *answerLog) get(taskID string) (json.RawMessage, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	env, ok := l.byTask[taskID]
	return env, ok
}

// waitTaskMessage waits until cl has received the task message for taskID
// and returns the task id from its meta.
func waitTaskMessage(t testing.TB, cl *Client, taskID string) string {
	t.Helper()
	Eventually(t, DeliveryTimeout, func() error {
		for _, m := range cl.Messages() {
			var meta struct {
				CorrelationID string `json:"correlationId"`
			}
			if json.Unmarshal(m.Meta, &meta) == nil && meta.CorrelationID == taskID && m.From == "concord.runs" {
				return nil
			}
		}
		return fmt.Errorf("no task message %s among %d messages", taskID, len(cl.Messages()))
	})
	return taskID
}

// replyParams is the map/send of a reply to a task.
func replyParams(taskID string, payload any) map[string]any {
	return map[string]any{"to": map[string]any{"agent": "concord.runs"}, "payload": payload,
		"meta": map[string]any{"isResult": true, "correlationId": taskID}}
}

// roundAnswer is a well-formed initial-round answer.
func roundAnswer(who string) map[string]any {
	return map[string]any{"kind": "round", "output": map[string]any{
		"fullResponse": who + " answers late.", "summary": who + " answers late.", "judgements": []any{},
		"extractedClaims": []any{map[string]any{"title": "Late claim", "statement": "A claim that arrives too late."}},
	}}
}
