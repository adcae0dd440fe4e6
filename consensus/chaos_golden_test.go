package consensus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestGolden_ChaosDigests pins the exact behaviour of Step on chaos runs
// (malformed, late, missing and perturbed answers): for each run, one
// digest over the state encoding after every input and every effect in
// JSON. testdata/chaos_digests.txt was written by the encoding/json-based
// implementation before the performance work, so it also proves that work
// changed no byte of any state, task, event or result.
func TestGolden_ChaosDigests(t *testing.T) {
	got := chaosDigests(t, func(in []Input) []Input { return in })
	path := filepath.Join("testdata", "chaos_digests.txt")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("chaos run digests differ from %s (run with -update after checking the change)", path)
	}
}

// chaosDigests runs the 180 chaos runs and returns one line per run: the
// digest of replaying conv(the run's inputs).
func chaosDigests(t *testing.T, conv func([]Input) []Input) []byte {
	reqs := []string{
		`{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"},{"id":"c"}],"roundPolicy":{"minRounds":1,"maxRounds":3}}`,
		`{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"}],
		 "participantsPolicy":{"minParticipants":2,"onInsufficientParticipants":"fail"},"roundPolicy":{"minRounds":0,"maxRounds":2},
		 "reportPolicy":{"composer":"representative","includeDeliberationTrace":true},"actionPolicy":{"prompt":"act"},
		 "waitingPolicy":{"perTaskTimeoutMs":3000,"perRoundTimeoutMs":2500,"globalDeadlineMs":9000}}`,
		`{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"},{"id":"e"}],
		 "scoringPolicy":{"tieBreaker":"least-objection"},"consensusPolicy":{"threshold":0.5},"context":{"z":1,"a":"<x>"},
		 "reportPolicy":{"includeDeliberationTrace":true,"traceLevel":"full"}}`,
	}
	var got bytes.Buffer
	for ri, raw := range reqs {
		req := mustRequest(t, raw)
		for seed := uint64(1); seed <= 60; seed++ {
			run, err := Simulate(context.Background(), req, chaosDir{seed}, SimOptions{SessionID: "p", StartMs: 5000})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&got, "%d %d %d %x\n", ri, seed, len(run.Inputs), chaosDigest(t, run, conv(run.Inputs)))
		}
	}
	return got.Bytes()
}

func chaosDigest(t *testing.T, run *Outcome, inputs []Input) []byte {
	h := sha256.New()
	var s *State
	for _, in := range inputs {
		var fx []Effect
		s, fx, _ = step(s, in)
		h.Write(EncodeState(s))
		for _, e := range fx {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(h, "%T %d ", e, len(b))
			h.Write(b)
			if ev, ok := e.(EmitEvent); ok {
				fmt.Fprintf(h, " seq=%d at=%d", ev.Event.Seq, ev.Event.AtMs)
			}
		}
	}
	h.Write(outcomeJSON(run))
	return h.Sum(nil)
}
