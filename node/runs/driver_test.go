package runs

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
)

// TestDriver_FullRunMatchesRunLocal: the leader's driver sends every task
// to persona agents, their replies finish the run, and the result equals
// consensus.Simulate's for the same agents apart from timing fields.
func TestDriver_FullRunMatchesRunLocal(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	id := e.mustStart(request3)
	e.waitStatus(id, StatusFinished)

	run, _ := e.mod.Get(id, Include{Result: true, Events: true})
	local := runLocal(t, id, request3)
	if local.Result == nil {
		t.Fatalf("local run failed: %+v", local.Failure)
	}
	if got, want := timingFree(t, run.Result), timingFree(t, local.Result); got != want {
		t.Fatalf("replicated result differs from Simulate:\n got %.3000s\nwant %.3000s", got, want)
	}
	// The same events, apart from the order in which replies arrived.
	count := func(types []string) string {
		m := map[string]int{}
		for _, ty := range types {
			m[ty]++
		}
		return fmt.Sprint(m)
	}
	var got, want []string
	for _, raw := range run.Events {
		var ev struct{ Type string }
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type)
	}
	for _, ev := range local.Events {
		want = append(want, ev.Type)
	}
	if count(got) != count(want) {
		t.Fatalf("events %v, Simulate %v", got, want)
	}
	if e.props.count("timer_fired") != 0 || e.props.count("task_failed") != 0 || e.agents.lateReplies() != 0 {
		t.Fatalf("unexpected proposals %v", e.props.kinds)
	}
}

// TestDriver_LeadershipChangeResendsAndRearms: a new leader's driver
// re-sends the tasks still outstanding and re-arms the timers from the
// log; one that came due while nobody led fires at once.
func TestDriver_LeadershipChangeResendsAndRearms(t *testing.T) {
	e := newEnv(t)
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	id := e.mustStart(request3)
	r0 := func(p string) string { return id + "/r0/" + p }
	eventually(t, 5*time.Second, func() error {
		for _, p := range []string{"p1", "p2", "p3"} {
			if e.agents.attempts(r0(p)) != 1 {
				return fmt.Errorf("%s sent %d times", r0(p), e.agents.attempts(r0(p)))
			}
		}
		return nil
	})
	e.setLeader(false)
	// While nobody drives, p1 and p2 answer (their replies still commit:
	// Raft forwards them); p3 never does and its task timer passes.
	tasks := map[string]*consensus.Task{}
	e.mod.mu.Lock()
	for _, task := range e.mod.runs[id].st.OutstandingTasks() {
		tasks[task.ParticipantID] = task
	}
	e.mod.mu.Unlock()
	for _, p := range []string{"p1", "p2"} {
		out, err := consensus.Persona{}.Answer(tasks[p])
		if err != nil {
			t.Fatal(err)
		}
		if _, rerr := e.reply(p, tasks[p].ID, out); rerr != nil {
			t.Fatalf("reply %s: %v", p, rerr)
		}
	}
	e.clock.Advance(6 * time.Second) // past the 5 s per-task timeout
	e.agents.setBehaviour(func(task *consensus.Task, _ int) int {
		if task.ID == r0("p3") {
			return actSilent // the re-sent task stays unanswered: its timer decides
		}
		return actAnswer
	})

	e.setLeader(true)
	e.waitStatus(id, StatusFinished)
	if n := e.agents.attempts(r0("p3")); n != 2 {
		t.Errorf("outstanding task %s sent %d times, want 2 (once per term)", r0("p3"), n)
	}
	for _, p := range []string{"p1", "p2"} {
		if n := e.agents.attempts(r0(p)); n != 1 {
			t.Errorf("settled task %s sent %d times, want 1", r0(p), n)
		}
	}
	run, _ := e.mod.Get(id, Include{})
	if len(run.Eliminations) != 1 || run.Eliminations[0].ParticipantID != "p3" || run.Eliminations[0].Reason != consensus.ReasonTimeout {
		t.Fatalf("eliminations %+v, want p3 timed out once", run.Eliminations)
	}
	if n := e.props.count("timer_fired"); n != 1 {
		t.Fatalf("%d timer_fired proposals, want 1", n)
	}
}

// TestDriver_AgentTimeoutEliminatesOnce: a silent agent's task timer fires
// once, one elimination is committed, and the run goes on without it.
func TestDriver_AgentTimeoutEliminatesOnce(t *testing.T) {
	e := newEnv(t)
	e.agents.setBehaviour(func(task *consensus.Task, _ int) int {
		if task.ParticipantID == "p3" {
			return actSilent
		}
		return actAnswer
	})
	e.setLeader(true)
	id := e.mustStart(request3)
	eventually(t, 5*time.Second, func() error {
		run, _ := e.mod.Get(id, Include{State: true})
		if n := len(run.State.OutstandingTasks); n != 1 {
			return fmt.Errorf("%d outstanding tasks, want only p3's", n)
		}
		return nil
	})
	e.clock.Advance(6 * time.Second)
	e.waitStatus(id, StatusFinished)
	run, _ := e.mod.Get(id, Include{Events: true, Result: true})
	elim := 0
	for _, raw := range run.Events {
		if strings.Contains(string(raw), `"type":"ParticipantEliminated"`) {
			elim++
		}
	}
	if elim != 1 || len(run.Eliminations) != 1 || run.Eliminations[0].ParticipantID != "p3" {
		t.Fatalf("%d elimination events, eliminations %+v", elim, run.Eliminations)
	}
	if n := e.props.count("timer_fired"); n != 1 {
		t.Fatalf("%d timer_fired proposals, want 1", n)
	}
	if got := run.Result.Metrics.WaitTimeouts; got != 1 {
		t.Fatalf("waitTimeouts %d", got)
	}
}

// TestDriver_RetriesUndeliverableTasks: a task that cannot be delivered
// (agent not connected) stays outstanding and is re-sent with backoff; no
// failure is committed for it.
func TestDriver_RetriesUndeliverableTasks(t *testing.T) {
	e := newEnv(t)
	e.agents.setBehaviour(func(task *consensus.Task, attempt int) int {
		if task.ParticipantID == "p2" && task.Round == 0 && attempt <= 3 {
			return actRefuse
		}
		return actAnswer
	})
	e.setLeader(true)
	id := e.mustStart(request3)
	e.waitStatus(id, StatusFinished)
	if n := e.agents.attempts(id + "/r0/p2"); n != 4 {
		t.Fatalf("p2's task sent %d times, want 4", n)
	}
	if n := e.props.count("task_failed"); n != 0 {
		t.Fatalf("%d task_failed proposals", n)
	}
	run, _ := e.mod.Get(id, Include{})
	if len(run.Eliminations) != 0 {
		t.Fatalf("eliminations %+v", run.Eliminations)
	}
}

// TestDriver_StopsWithoutLeadership: no driver runs while not leader, so
// nothing is sent and no timer fires.
func TestDriver_StopsWithoutLeadership(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	id := e.mustStart(request3)
	eventually(t, 5*time.Second, func() error {
		if e.agents.attempts(id+"/r0/p1") == 0 {
			return fmt.Errorf("not sent")
		}
		return nil
	})
	e.setLeader(false)
	e.clock.Advance(time.Minute)
	time.Sleep(100 * time.Millisecond) // let time pass: nothing may happen
	if n := e.props.count("timer_fired"); n != 0 {
		t.Fatalf("%d timers fired without leadership", n)
	}
	if e.status(id) != StatusRunning {
		t.Fatalf("status %s", e.status(id))
	}
}

// TestDriver_ResendsTasksAcceptedButLost: the router accepted p2's first
// task message but the connection died with it (the agent silently never
// gets it). The driver sends it again after ResendInterval and the run
// finishes without a timeout or an elimination.
func TestDriver_ResendsTasksAcceptedButLost(t *testing.T) {
	e := newEnv(t, func(c *ServiceConfig) { c.ResendInterval = 100 * time.Millisecond })
	e.agents.setBehaviour(func(task *consensus.Task, attempt int) int {
		if task.ParticipantID == "p2" && task.Round == 0 && attempt == 1 {
			return actSwallow
		}
		return actAnswer
	})
	e.setLeader(true)
	id := e.mustStart(request3)
	e.waitStatus(id, StatusFinished)
	if n := e.agents.attempts(id + "/r0/p2"); n < 2 {
		t.Fatalf("p2's lost task sent %d times, want it sent again", n)
	}
	run, _ := e.mod.Get(id, Include{})
	if len(run.Eliminations) != 0 || e.props.count("task_failed") != 0 {
		t.Fatalf("eliminations %+v, task_failed %d", run.Eliminations, e.props.count("task_failed"))
	}
}
