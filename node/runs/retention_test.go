package runs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func forgetInput(runID string, at int64) *concordv1.RunInput {
	return &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: "n1",
		Input: &concordv1.RunInput_Forget{Forget: &concordv1.RunForget{Reason: "retention"}}}
}

// TestModule_Forget: only a finished run can be forgotten; afterwards it
// is gone from reads and snapshots, and a second forget is "not found".
func TestModule_Forget(t *testing.T) {
	r := newReplica(t)
	for i, id := range []string{"run-a", "run-b"} {
		if _, err := r.apply(startInput(t, id, t0+int64(i), request3)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.apply(cancelInput("run-a", t0+10, "done with it")); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := r.apply(forgetInput("run-b", t0+20)); !errors.As(err, &e) || e.Code != CodeInvalidParams {
		t.Fatalf("forget of a running run: %v, want invalid params", err)
	}
	if _, err := r.apply(forgetInput("run-a", t0+20)); err != nil {
		t.Fatalf("forget of a finished run: %v", err)
	}
	if _, ok := r.mod.Get("run-a", Include{}); ok {
		t.Fatal("forgotten run still readable")
	}
	if _, err := r.apply(forgetInput("run-a", t0+30)); !errors.As(err, &e) || e.Code != CodeRunNotFound {
		t.Fatalf("second forget: %v, want run not found", err)
	}
	if list, _ := r.mod.List("", "", 10); len(list) != 1 || list[0].RunID != "run-b" {
		t.Fatalf("list after forget: %+v", list)
	}
	// A replica restored from the snapshot has only the remaining run.
	other := newReplica(t)
	commit, err := other.mod.Restore(records(snapshotRecords(t, r.mod)))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if _, ok := other.mod.Get("run-a", Include{}); ok {
		t.Fatal("forgotten run in the snapshot")
	}
	if _, ok := other.mod.Get("run-b", Include{}); !ok {
		t.Fatal("remaining run missing from the snapshot")
	}
}

func TestModule_Expired(t *testing.T) {
	r := newReplica(t)
	// run-1..run-4 finish at t0+1000*k; run-5 keeps running.
	for k := 1; k <= 5; k++ {
		id := fmt.Sprintf("run-%d", k)
		if _, err := r.apply(startInput(t, id, t0, request3)); err != nil {
			t.Fatal(err)
		}
		if k < 5 {
			if _, err := r.apply(cancelInput(id, t0+int64(1000*k), "finish")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name        string
		now         int64
		retention   time.Duration
		maxFinished int
		want        []string
	}{
		{"nothing old enough", t0 + 1500, time.Hour, 0, []string{}},
		{"by age", t0 + 2500, 500 * time.Millisecond, 0, []string{"run-1", "run-2"}},
		{"by count", t0, 0, 1, []string{"run-1", "run-2", "run-3"}},
		{"age then count", t0 + 1500, 500 * time.Millisecond, 2, []string{"run-1", "run-2"}},
		{"both disabled", t0 + 1e9, 0, 0, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.mod.expired(tc.now, tc.retention, tc.maxFinished); !slices.Equal(got, tc.want) {
				t.Fatalf("expired = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestService_ReaperForgetsExpiredRuns: the leader's reaper forgets runs
// finished longer ago than FinishedRetention through the log.
func TestService_ReaperForgetsExpiredRuns(t *testing.T) {
	e := newEnv(t, func(c *ServiceConfig) { c.PruneInterval = 0 }) // passes driven by hand
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	id := e.mustStart(request3)
	if _, err := e.call(MethodCancel, `{"runId":"`+id+`"}`); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	e.waitStatus(id, StatusCancelled)
	ctx := context.Background()
	if n := e.svc.reapOnce(ctx); n != 0 {
		t.Fatalf("forgot %d runs before the retention passed", n)
	}
	e.clock.Advance(25 * time.Hour)
	if n := e.svc.reapOnce(ctx); n != 1 {
		t.Fatalf("forgot %d runs after the retention passed, want 1", n)
	}
	if e.props.count("forget") != 1 {
		t.Fatalf("forget proposals = %d, want 1", e.props.count("forget"))
	}
	if _, err := e.call(MethodGet, `{"runId":"`+id+`"}`); err == nil || err.Code != CodeRunNotFound {
		t.Fatalf("get after retention: %v, want run not found", err)
	}
}

// TestService_ReaperLoop: the loop started with leadership makes the passes.
func TestService_ReaperLoop(t *testing.T) {
	e := newEnv(t, func(c *ServiceConfig) { c.PruneInterval, c.FinishedRetention = 10*time.Millisecond, time.Hour })
	e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
	e.setLeader(true)
	id := e.mustStart(request3)
	if _, err := e.call(MethodCancel, `{"runId":"`+id+`"}`); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	e.waitStatus(id, StatusCancelled)
	e.clock.Advance(2 * time.Hour)
	eventually(t, 5*time.Second, func() error {
		if _, err := e.call(MethodGet, `{"runId":"`+id+`"}`); err == nil || err.Code != CodeRunNotFound {
			return fmt.Errorf("run still readable (%v)", err)
		}
		return nil
	})
}
