package runs

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestModule_Files checks that a run's result-file material is its
// replicated state: the result, the failure of a cancelled run, and the
// engine events exactly as get returns them.
func TestModule_Files(t *testing.T) {
	r := newReplica(t)
	scenario(t, r)
	a, _ := r.mod.Get(runA, Include{Result: true, Events: true})
	fa, ok := r.mod.Files(runA)
	if !ok || fa.Status != StatusFinished || fa.RequestID != "req-1" || fa.Result != a.Result || fa.Failure != nil {
		t.Fatalf("files of run A: ok %v status %q request %q result %p (get: %p) failure %+v",
			ok, fa.Status, fa.RequestID, fa.Result, a.Result, fa.Failure)
	}
	if len(fa.Events) != len(a.Events) {
		t.Fatalf("files of run A: %d events, get has %d", len(fa.Events), len(a.Events))
	}
	for i, ev := range fa.Events {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		if json.Unmarshal(b, &got) != nil || json.Unmarshal(a.Events[i], &want) != nil || !reflect.DeepEqual(got, want) || ev.Seq != int64(i) {
			t.Fatalf("event %d (seq %d): files %s, get %s", i, ev.Seq, b, a.Events[i])
		}
	}
	fb, ok := r.mod.Files(runB)
	if !ok || fb.Status != StatusCancelled || fb.Result != nil || fb.Failure == nil || fb.Failure.Code != "Cancelled" {
		t.Fatalf("files of run B: %+v", fb)
	}
	if _, ok := r.mod.Files("01NOPE"); ok {
		t.Fatal("files of an unknown run")
	}
}
