package runs

import (
	"errors"
	"testing"

	"github.com/concordmap/concord/consensus"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestModule_RefusedInputsChangeNothing: every refusal is reported alike by
// Check (before proposing) and Apply (after a race), and leaves the module
// and the event window untouched.
func TestModule_RefusedInputsChangeNothing(t *testing.T) {
	r := newReplica(t)
	if _, err := r.apply(startInput(t, runA, t0, request3)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apply(startInput(t, runB, t0, request3)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apply(cancelInput(runB, t0+1, "")); err != nil {
		t.Fatal(err)
	}
	tasks := map[string]*consensus.Task{}
	for _, task := range r.outstanding(runA) {
		tasks[task.ParticipantID] = task
	}
	p1, p2 := tasks["p1"], tasks["p2"]
	if _, err := r.apply(resultInput(runA, t0+10, p1.ID, "p1", persona(t, p1))); err != nil {
		t.Fatal(err)
	}
	bTask := runB + "/r0/p1"

	tests := []struct {
		name   string
		in     *concordv1.RunInput
		code   int
		reason string
	}{
		{"unknown run", resultInput("nope", t0, "nope/r0/p1", "p1", []byte(`{}`)), CodeRunNotFound, ""},
		{"duplicate result", resultInput(runA, t0+20, p1.ID, "p1", persona(t, p1)), CodeTaskUnknown, ReasonAlreadySettled},
		{"duplicate failure", failedInputAt(runA, t0+20, p1.ID, "p1", "error", "x"), CodeTaskUnknown, ReasonAlreadySettled},
		{"unknown task", resultInput(runA, t0+20, runA+"/r7/p1", "p1", []byte(`{}`)), CodeTaskUnknown, ReasonUnknownTask},
		{"wrong agent", resultInput(runA, t0+20, p2.ID, "p1", persona(t, p2)), CodePermissionDenied, ReasonWrongAgent},
		{"timer not due", timerInput(runA, p2.TimeoutAt-1, p2.ID), CodeTaskUnknown, ReasonTimerNotDue},
		{"unknown timer", timerInput(runA, p2.TimeoutAt, runA+"#nope"), CodeTaskUnknown, ReasonUnknownTimer},
		{"settled task's timer", timerInput(runA, p1.TimeoutAt, p1.ID), CodeTaskUnknown, ReasonUnknownTimer},
		{"start existing", startInput(t, runA, t0, request3), CodeInvalidRequest, ""},
		{"start without request", &concordv1.RunInput{RunId: "x", Input: &concordv1.RunInput_Start{Start: &concordv1.RunStart{}}}, CodeInvalidParams, ""},
		{"no run id", &concordv1.RunInput{Input: &concordv1.RunInput_Cancel{Cancel: &concordv1.RunCancel{}}}, CodeInvalidParams, ""},
		{"no input", &concordv1.RunInput{RunId: runA}, CodeInvalidParams, ""},
		{"bad failure kind", failedInputAt(runA, t0+20, p2.ID, "p2", "meltdown", ""), CodeInvalidParams, ""},
		{"cancel finished", cancelInput(runB, t0+20, ""), CodeRunFinished, ""},
		{"result after cancel", resultInput(runB, t0+20, bTask, "p1", []byte(`{}`)), CodeTaskUnknown, ReasonAlreadySettled},
		{"timer after cancel", timerInput(runB, t0+1e9, bTask), CodeTaskUnknown, ReasonRunFinished},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := dump(t, r.mod, r.reg)
			checkErr := r.mod.Check(tc.in)
			_, applyErr := r.apply(tc.in)
			for what, err := range map[string]error{"Check": checkErr, "Apply": applyErr} {
				var de *Error
				if !errors.As(err, &de) || de.Code != tc.code {
					t.Fatalf("%s: %v, want code %d", what, err, tc.code)
				}
				if tc.reason != "" && de.Details["reason"] != tc.reason {
					t.Fatalf("%s: reason %v, want %s", what, de.Details["reason"], tc.reason)
				}
			}
			if checkErr.Error() != applyErr.Error() {
				t.Fatalf("Check %q and Apply %q disagree", checkErr, applyErr)
			}
			if after := dump(t, r.mod, r.reg); after != before {
				t.Fatal("refused input changed state")
			}
		})
	}

	t.Run("invalid request is refused by Apply", func(t *testing.T) {
		before := dump(t, r.mod, r.reg)
		in := &concordv1.RunInput{RunId: "bad", TimeMs: t0,
			Input: &concordv1.RunInput_Start{Start: &concordv1.RunStart{RequestJson: []byte(`{"requestId":"x"}`)}}}
		_, err := r.apply(in)
		if !errors.Is(err, consensus.ErrInvalidRequest) {
			t.Fatalf("err %v", err)
		}
		if after := dump(t, r.mod, r.reg); after != before {
			t.Fatal("refused start changed state")
		}
	})
}
