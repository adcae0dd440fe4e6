package runs

import (
	"bytes"
	"testing"
)

// TestTaskEncoder_MatchesMarshalJSON: the catalog-sharing encoder writes
// exactly the engine's bytes for every task of a whole run.
func TestTaskEncoder_MatchesMarshalJSON(t *testing.T) {
	log := scenario(t, newReplica(t)) // run A goes through every task kind
	replay := newReplica(t)
	var enc taskEncoder
	checked := 0
	for _, s := range log {
		_, _ = replay.apply(s.in)
		for _, id := range []string{runA, runB} {
			if replay.mod.runs[id] == nil {
				continue
			}
			for _, task := range replay.outstanding(id) {
				parts, err := enc.encode(task)
				if err != nil {
					t.Fatal(err)
				}
				got := parts.appendTo(nil)
				want, err := task.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("task %s:\n got %s\nwant %s", task.ID, got, want)
				}
				checked++
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d tasks checked", checked)
	}
	if len(enc.catalogs) == 0 {
		t.Fatal("no catalog was cached")
	}
}
