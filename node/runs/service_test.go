package runs

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/rpc"
)

// outstandingOf returns a run's outstanding tasks by participant.
func (e *env) outstandingOf(runID string) map[string]*consensus.Task {
	e.mod.mu.Lock()
	defer e.mod.mu.Unlock()
	out := map[string]*consensus.Task{}
	for _, task := range e.mod.runs[runID].st.OutstandingTasks() {
		out[task.ParticipantID] = task
	}
	return out
}

// refused checks a refusal's code and reason and that nothing was written.
func (e *env) refused(t testing.TB, what string, fn func() (map[string]any, *rpc.Error), code int, reason string) {
	t.Helper()
	before := e.store.AppliedIndex()
	res, err := fn()
	if err == nil {
		t.Fatalf("%s: want error %d, got %v", what, code, res)
	}
	if err.Code != code {
		t.Fatalf("%s: error %d %q %+v, want %d", what, err.Code, err.Message, err.Data, code)
	}
	if reason != "" && (err.Data == nil || err.Data.Details["reason"] != reason) {
		t.Fatalf("%s: details %+v, want reason %s", what, err.Data, reason)
	}
	if after := e.store.AppliedIndex(); after != before {
		t.Fatalf("%s: refusal wrote to the log (index %d -> %d)", what, before, after)
	}
}

func TestService_RepliesAcceptedAndRefused(t *testing.T) {
	e := newEnv(t)
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	id := e.mustStart(request3)
	tasks := e.outstandingOf(id)
	p1, p2, p3 := tasks["p1"], tasks["p2"], tasks["p3"]
	answer := func(task *consensus.Task) json.RawMessage {
		out, err := consensus.Persona{}.Answer(task)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	res, rerr := e.reply("p1", p1.ID, answer(p1))
	if rerr != nil {
		t.Fatalf("valid reply refused: %v %+v", rerr, rerr.Data)
	}
	if d, _ := res["delivered"].([]any); res["messageId"] == "" || len(d) != 1 || d[0] != ServiceID {
		t.Fatalf("reply result %v", res)
	}

	e.refused(t, "duplicate reply", func() (map[string]any, *rpc.Error) { return e.reply("p1", p1.ID, answer(p1)) },
		CodeTaskUnknown, ReasonAlreadySettled)
	e.refused(t, "unknown task", func() (map[string]any, *rpc.Error) { return e.reply("p1", id+"/r9/p1", answer(p1)) },
		CodeTaskUnknown, ReasonUnknownTask)
	e.refused(t, "unknown run", func() (map[string]any, *rpc.Error) {
		return e.reply("p1", "01XXXXXXXXXXXXXXXXXXXXXXXX/r0/p1", answer(p1))
	},
		CodeRunNotFound, "")
	e.refused(t, "wrong agent", func() (map[string]any, *rpc.Error) { return e.reply("p1", p2.ID, answer(p2)) },
		CodePermissionDenied, ReasonWrongAgent)
	e.refused(t, "non-participant", func() (map[string]any, *rpc.Error) { return e.reply("x", p2.ID, answer(p2)) },
		CodePermissionDenied, ReasonNotParticipant)
	e.refused(t, "no correlation id", func() (map[string]any, *rpc.Error) {
		res, err := e.svc.HandleSend(t.Context(), agentSender("p2"), json.RawMessage(`{"to":"concord.runs","payload":{}}`))
		return decodeResult(t, res, err)
	}, CodeInvalidParams, "")
	e.refused(t, "no payload", func() (map[string]any, *rpc.Error) {
		res, err := e.svc.HandleSend(t.Context(), agentSender("p2"), json.RawMessage(`{"to":"concord.runs","meta":{"correlationId":"`+p2.ID+`"}}`))
		return decodeResult(t, res, err)
	}, CodeInvalidParams, "")

	// An error answer is committed as a failed task: p2 is eliminated.
	if _, rerr := e.reply("p2", p2.ID, json.RawMessage(`{"kind":"error","error":"model overloaded"}`)); rerr != nil {
		t.Fatalf("error answer refused: %v", rerr)
	}
	// p3 times out; its late reply is then refused and writes nothing.
	e.clock.Advance(6 * time.Second)
	eventually(t, 5*time.Second, func() error {
		if run, _ := e.mod.Get(id, Include{}); len(run.Eliminations) != 2 {
			return fmt.Errorf("eliminations %+v", run.Eliminations)
		}
		return nil
	})
	run, _ := e.mod.Get(id, Include{Events: true})
	got := fmt.Sprint(run.Eliminations)
	if !strings.Contains(got, "p2 0 error") || !strings.Contains(got, "p3 0 timeout") {
		t.Fatalf("eliminations %s", got)
	}
	found := false
	for _, ev := range run.Events {
		found = found || strings.Contains(string(ev), "model overloaded")
	}
	if !found {
		t.Fatal("the agent's error text is not in the elimination event")
	}
	e.refused(t, "late reply", func() (map[string]any, *rpc.Error) { return e.reply("p3", p3.ID, answer(p3)) },
		CodeTaskUnknown, ReasonAlreadySettled)
	if n := e.props.count("task_result"); n != 1 {
		t.Fatalf("%d task_result proposals, want 1 (refusals are not proposed)", n)
	}
}

func TestService_Cancel(t *testing.T) {
	e := newEnv(t)
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	id := e.mustStart(request3)
	eventually(t, 5*time.Second, func() error {
		for _, p := range []string{"p1", "p2", "p3"} {
			if e.agents.attempts(id+"/r0/"+p) == 0 {
				return fmt.Errorf("task of %s not sent yet", p)
			}
		}
		return nil
	})
	res, err := e.call(MethodCancel, `{"runId":"`+id+`","reason":"not needed"}`)
	if err != nil {
		t.Fatal(err)
	}
	run, _ := res["run"].(map[string]any)
	if run["status"] != StatusCancelled || run["finishedAt"] == nil {
		t.Fatalf("cancel result %v", res)
	}
	if e2, _ := run["error"].(map[string]any); e2["code"] != "Cancelled" || !strings.Contains(e2["message"].(string), "not needed") {
		t.Fatalf("error %v", run["error"])
	}
	e.refused(t, "cancel twice", func() (map[string]any, *rpc.Error) { return e.call(MethodCancel, `{"runId":"`+id+`"}`) },
		CodeRunFinished, "")
	e.refused(t, "cancel unknown", func() (map[string]any, *rpc.Error) { return e.call(MethodCancel, `{"runId":"nope"}`) },
		CodeRunNotFound, "")
	e.refused(t, "cancel without id", func() (map[string]any, *rpc.Error) { return e.call(MethodCancel, `{}`) },
		CodeInvalidParams, "")
	// Every agent that was sent a task is told it is cancelled, once.
	eventually(t, 5*time.Second, func() error {
		for _, p := range []string{"p1", "p2", "p3"} {
			if n := e.agents.cancelNotices(id + "/r0/" + p); n != 1 {
				return fmt.Errorf("%s got %d cancellation notices, want 1", p, n)
			}
		}
		return nil
	})
	// The driver forgot the run: nothing more is sent, no timer fires.
	sent := e.agents.attempts(id + "/r0/p1")
	if sent != 1 {
		t.Fatalf("sent %d", sent)
	}
	e.clock.Advance(time.Hour)
	time.Sleep(100 * time.Millisecond) // let time pass: nothing may happen
	if e.agents.attempts(id+"/r0/p1") != sent || e.props.count("timer_fired") != 0 {
		t.Fatalf("driver still acts on a cancelled run: sent %d -> %d, timers fired %d", sent, e.agents.attempts(id+"/r0/p1"), e.props.count("timer_fired"))
	}
	if e.driving() && len(e.mod.runs[id].timers) != 0 {
		t.Fatal("cancelled run keeps timers")
	}
}

func TestService_StartRefusals(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	tests := []struct {
		name   string
		params string
		code   int
		check  func(*rpc.Error) error
	}{
		{"no request", `{}`, CodeInvalidParams, nil},
		{"request not an object", `{"request":"x"}`, CodeInvalidParams, nil},
		{"params not an object", `[1]`, CodeInvalidParams, nil},
		{"invalid request", `{"request":{"requestId":"r","task":"","participants":[{"id":"p1"}],"roundPolicy":{"maxRounds":0}}}`,
			CodeInvalidParams, func(err *rpc.Error) error {
				list, _ := err.Data.Details["errors"].([]any)
				paths := map[string]bool{}
				for _, fe := range list {
					m, _ := fe.(map[string]any)
					if m["message"] == "" {
						return fmt.Errorf("field error without message: %v", m)
					}
					paths[m["path"].(string)] = true
				}
				for _, want := range []string{"request.task", "request.roundPolicy.maxRounds", "request.participants"} {
					if !paths[want] {
						return fmt.Errorf("details.errors %v lacks %s", list, want)
					}
				}
				return nil
			}},
		{"unknown agent", `{"request":{"requestId":"r","task":"t","participants":[{"id":"p1"},{"id":"ghost"}]}}`,
			CodeAgentNotFound, func(err *rpc.Error) error {
				if fmt.Sprint(err.Data.Details["agents"]) != "[ghost]" {
					return fmt.Errorf("details %v", err.Data.Details)
				}
				return nil
			}},
		{"unknown reporter", `{"request":{"requestId":"r","task":"t","participants":[{"id":"p1"},{"id":"p2"}],"reportPolicy":{"composer":"representative","representativeId":"ghost"}}}`,
			CodeAgentNotFound, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got *rpc.Error
			e.refused(t, tc.name, func() (map[string]any, *rpc.Error) {
				res, err := e.call(MethodStart, tc.params)
				got = err
				return res, err
			}, tc.code, "")
			if tc.check != nil {
				if err := tc.check(got); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if runs, _ := e.mod.List("", "", 10); len(runs) != 0 {
		t.Fatalf("refused starts stored runs: %v", runs)
	}
}

func TestService_GetAndList(t *testing.T) {
	e := newEnv(t)
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	var ids []string
	for range 5 {
		ids = append(ids, e.mustStart(request3))
	}
	if _, err := e.call(MethodCancel, `{"runId":"`+ids[1]+`"}`); err != nil {
		t.Fatal(err)
	}

	res, err := e.call(MethodGet, `{"runId":"`+ids[0]+`","include":["events","state"]}`)
	if err != nil {
		t.Fatal(err)
	}
	run := res["run"].(map[string]any)
	if run["runId"] != ids[0] || run["requestId"] != "req-1" || run["status"] != StatusRunning ||
		run["phase"] != "initial" || run["round"] != float64(0) || run["result"] != nil {
		t.Fatalf("get %v", run)
	}
	if evs, _ := run["events"].([]any); len(evs) != 2 { // SessionStarted, RoundDispatched
		t.Fatalf("events %v", run["events"])
	}
	if st, _ := run["state"].(map[string]any); len(st["outstandingTasks"].([]any)) != 3 || len(st["timers"].([]any)) != 4 {
		t.Fatalf("state %v", run["state"])
	}
	e.refused(t, "get unknown", func() (map[string]any, *rpc.Error) { return e.call(MethodGet, `{"runId":"nope"}`) }, CodeRunNotFound, "")
	e.refused(t, "get bad include", func() (map[string]any, *rpc.Error) {
		return e.call(MethodGet, `{"runId":"`+ids[0]+`","include":["everything"]}`)
	}, CodeInvalidParams, "")

	// Newest first, two per page.
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		params := `{"limit":2}`
		if cursor != "" {
			params = `{"limit":2,"cursor":"` + cursor + `"}`
		}
		res, err := e.call(MethodList, params)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res["runs"].([]any) {
			seen = append(seen, r.(map[string]any)["runId"].(string))
		}
		next, _ := res["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages %v, want %v", seen, want)
	}
	res, err = e.call(MethodList, `{"status":"cancelled"}`)
	if err != nil {
		t.Fatal(err)
	}
	if list := res["runs"].([]any); len(list) != 1 || list[0].(map[string]any)["runId"] != ids[1] {
		t.Fatalf("cancelled runs %v", list)
	}
	for _, bad := range []string{`{"status":"odd"}`, `{"limit":0}`, `{"limit":100000}`, `{"limit":"2"}`, `{"cursor":5}`} {
		e.refused(t, "list "+bad, func() (map[string]any, *rpc.Error) { return e.call(MethodList, bad) }, CodeInvalidParams, "")
	}
}
