package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/concordmap/concord/consensus"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

const (
	runA = "01JA0000000000000000000000"
	runB = "01JB0000000000000000000000"
)

// step is one applied input and the error Apply returned for it.
type step struct {
	in  *concordv1.RunInput
	err string
}

// scenario drives two runs on r through every input kind: run A finishes
// after a failed task (p3, round 1), a premature and then a due timer
// (p2, round 2), a duplicate result, a report and an action; run B is
// cancelled after one answer. It returns every input in order, refused
// ones included (they would be committed no-ops after a race).
func scenario(t *testing.T, r *replica) []step {
	t.Helper()
	var log []step
	apply := func(in *concordv1.RunInput) error {
		_, err := r.apply(in)
		s := step{in: in}
		if err != nil {
			s.err = err.Error()
		}
		log = append(log, s)
		return err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	at := t0
	must(apply(startInput(t, runA, at, request3)))
	must(apply(startInput(t, runB, at+1, strings.Replace(request3, "req-1", "req-2", 1))))
	for _, task := range r.outstanding(runB) {
		if task.ParticipantID == "p1" {
			must(apply(resultInput(runB, at+2, task.ID, "p1", persona(t, task))))
		}
	}
	must(apply(cancelInput(runB, at+3, "changed our minds")))

	for range 50 {
		tasks := r.outstanding(runA)
		if len(tasks) == 0 {
			break
		}
		at += 100
		var late *consensus.Task
		for _, task := range tasks {
			switch {
			case task.Kind == consensus.TaskRound && task.Round == 1 && task.ParticipantID == "p3":
				must(apply(failedInputAt(runA, at, task.ID, "p3", "error", "agent crashed")))
			case task.Kind == consensus.TaskRound && task.Round == 2 && task.ParticipantID == "p2":
				late = task
			default:
				out := persona(t, task)
				must(apply(resultInput(runA, at, task.ID, task.ParticipantID, out)))
				if err := apply(resultInput(runA, at, task.ID, task.ParticipantID, out)); !errors.Is(err, ErrTaskUnknown) {
					t.Fatalf("duplicate result: %v", err)
				}
			}
		}
		if late != nil {
			if err := apply(timerInput(runA, late.TimeoutAt-1, late.ID)); !errors.Is(err, ErrTaskUnknown) {
				t.Fatalf("premature timer: %v", err)
			}
			must(apply(timerInput(runA, late.TimeoutAt, late.ID)))
		}
	}
	return log
}

func TestModule_ScenarioOutcome(t *testing.T) {
	r := newReplica(t)
	log := scenario(t, r)
	kinds := map[string]int{}
	for _, s := range log {
		kinds[fmt.Sprintf("%T", s.in.GetInput())]++
	}
	if len(kinds) != 5 {
		t.Fatalf("scenario covers input kinds %v, want all 5", kinds)
	}
	a, ok := r.mod.Get(runA, Include{Result: true, Events: true, State: true})
	if !ok || a.Status != StatusFinished || a.Result == nil || a.FinishedAt == 0 {
		t.Fatalf("run A: %+v", a.Summary)
	}
	if got := a.Result.Status; got != consensus.StatusInterrupted {
		t.Errorf("run A result status %q, want interrupted (p3 failed, p2 timed out)", got)
	}
	if len(a.Eliminations) != 2 || a.Eliminations[0].ParticipantID != "p3" || a.Eliminations[0].Reason != consensus.ReasonError ||
		a.Eliminations[1].ParticipantID != "p2" || a.Eliminations[1].Reason != consensus.ReasonTimeout {
		t.Errorf("eliminations %+v", a.Eliminations)
	}
	if a.Result.Action == nil || a.Result.Action.Status != "completed" {
		t.Errorf("action %+v", a.Result.Action)
	}
	if len(a.State.OutstandingTasks) != 0 || len(a.State.Timers) != 0 {
		t.Errorf("finished run still has tasks %v timers %v", a.State.OutstandingTasks, a.State.Timers)
	}
	b, _ := r.mod.Get(runB, Include{})
	if b.Status != StatusCancelled || b.Error == nil || b.Error.Code != "Cancelled" {
		t.Fatalf("run B: %+v", b.Summary)
	}

	// Every engine event is in the registry window as a MAP event, in order.
	evs := r.reg.EventsAfter(0, 0)
	if want := len(a.Events) + int(r.mod.runs[runB].st.EventCount()); len(evs) != want {
		t.Fatalf("registry has %d events, want %d", len(evs), want)
	}
	var last struct{ seqA int64 }
	last.seqA = -1
	for _, ev := range evs {
		var data struct {
			RunID, RequestID, At string
			Seq                  int64
			Payload              json.RawMessage
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil || !strings.HasPrefix(ev.Type, EventTypePrefix) ||
			ev.Source != ServiceID || data.At == "" || len(data.Payload) == 0 {
			t.Fatalf("bad MAP event %+v %s (%v)", ev, ev.Data, err)
		}
		if data.RunID == runA {
			if data.Seq != last.seqA+1 || data.RequestID != "req-1" {
				t.Fatalf("run A event seq %d after %d (%s)", data.Seq, last.seqA, ev.Data)
			}
			last.seqA = data.Seq
			var env struct{ Type string }
			_ = json.Unmarshal(a.Events[data.Seq], &env)
			if EventTypePrefix+env.Type != ev.Type {
				t.Fatalf("event %d: MAP type %s, engine type %s", data.Seq, ev.Type, env.Type)
			}
		}
	}
}

func TestModule_ReplicasApplyIdentically(t *testing.T) {
	a := newReplica(t)
	log := scenario(t, a)
	b := newReplica(t)
	for i, s := range log {
		_, err := b.apply(s.in)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != s.err {
			t.Fatalf("input %d: replica B error %q, replica A %q", i, got, s.err)
		}
	}
	if da, db := dump(t, a.mod, a.reg), dump(t, b.mod, b.reg); da != db {
		t.Fatalf("replicas differ:\nA: %.2000s\nB: %.2000s", da, db)
	}
}

func TestModule_SnapshotRestoreMidRun(t *testing.T) {
	ref := newReplica(t)
	log := scenario(t, ref)
	want := dump(t, ref.mod, nil)
	for _, cut := range []int{1, 4, len(log) / 3, len(log) / 2, len(log) - 3} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			x := newReplica(t)
			for _, s := range log[:cut] {
				_, _ = x.apply(s.in)
			}
			y := newReplica(t)
			commit, err := y.mod.Restore(records(snapshotRecords(t, x.mod)))
			if err != nil {
				t.Fatal(err)
			}
			commit()
			y.index = x.index
			if dx, dy := dump(t, x.mod, nil), dump(t, y.mod, nil); dx != dy {
				t.Fatalf("restored module differs at cut %d", cut)
			}
			for i, s := range log[cut:] {
				_, err := y.apply(s.in)
				got := ""
				if err != nil {
					got = err.Error()
				}
				if got != s.err {
					t.Fatalf("input %d after restore: error %q, want %q", cut+i, got, s.err)
				}
			}
			if got := dump(t, y.mod, nil); got != want {
				t.Fatalf("run continued after restore differs from the uninterrupted one")
			}
			// Events appended after the restore carry the same ids as on the
			// uninterrupted replica.
			refIDs := map[string]bool{}
			for _, ev := range ref.reg.EventsAfter(0, 0) {
				refIDs[ev.ID] = true
			}
			for _, ev := range y.reg.EventsAfter(0, 0) {
				if !refIDs[ev.ID] {
					t.Fatalf("event id %s not on the reference replica", ev.ID)
				}
			}
		})
	}
}

func TestModule_RestoreRejectsBadRecords(t *testing.T) {
	r := newReplica(t)
	if _, err := r.apply(startInput(t, runA, t0, request3)); err != nil {
		t.Fatal(err)
	}
	good := snapshotRecords(t, r.mod)
	tests := map[string][][]byte{
		"empty":     nil,
		"no header": good[1:],
		"garbage":   {good[0], []byte("\xff\xff")},
		"duplicate": {good[0], good[1], good[1]},
		"corrupt state": {good[0], func() []byte {
			var rec concordv1.RunsRecord
			_ = protoUnmarshal(good[1], &rec)
			rec.GetRun().EngineState = []byte("nope")
			return protoMarshal(&rec)
		}()},
	}
	for name, recs := range tests {
		t.Run(name, func(t *testing.T) {
			fresh := newReplica(t)
			if _, err := fresh.mod.Restore(records(recs)); !errors.Is(err, ErrSnapshotFormat) {
				t.Fatalf("err %v, want ErrSnapshotFormat", err)
			}
			if list, _ := fresh.mod.List("", "", 10); len(list) != 0 {
				t.Fatal("failed restore changed state")
			}
		})
	}
}
