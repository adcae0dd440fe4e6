package consensus

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(minimalRequest))
	f.Add([]byte(`{"requestId":"r","task":"t","participants":[{"id":"a"},{"id":"a"}],"waitingPolicy":{"mode":1}}`))
	f.Add([]byte(`{"requestId":"r","task":"t","participants":[{"id":"a"},{"id":"b"}],"roundPolicy":{"minRounds":9e15},"context":{"x":[1,{"y":null}]}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := ParseRequest(raw)
		if err != nil {
			var ve *ValidationError
			if r != nil || !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("bad error shape: %v %v", r, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted request fails Validate: %v", err)
		}
		// Accepted requests are normalised: encoding and re-parsing is stable,
		// and a run can start from them.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseRequest(b)
		if err != nil {
			t.Fatalf("normalised request rejected: %v", err)
		}
		b2, _ := json.Marshal(again)
		if string(b) != string(b2) {
			t.Fatalf("normalisation not idempotent:\n%s\n%s", b, b2)
		}
		if _, _, err := step(nil, Start(0, "s", r)); err != nil {
			t.Fatalf("start refused an accepted request: %v", err)
		}
		// The state's private copy is the JSON round trip of the request,
		// whichever way cloneRequest takes.
		want, err := cloneRequestJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cloneRequest(r); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("cloneRequest differs from the JSON round trip: %v\n%+v\n%+v", err, got, want)
		}
	})
}

func FuzzDecodeRoundOutput(f *testing.F) {
	for _, a := range []Answer{
		out("a", map[string]any{"taskTitle": "t", "extractedClaims": []any{claim("c")}}),
		out("a", map[string]any{"judgements": []any{j("a:0:0", "revise", "mergesWith", "b:0:0", "revisedStatement", "x")}}),
		out("a", map[string]any{"claimVotes": []any{v("a:0:0", "accept")}}),
	} {
		raw, _ := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "a", Phase: PhaseDebate, Round: 1}, a.Output)
		f.Add([]byte(raw), uint8(1))
	}
	f.Add([]byte(`{"kind":"round","output":{"fullResponse":"x","summary":"y","judgements":[],"selfScore":1e308}}`), uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, ph uint8) {
		phase := []Phase{PhaseInitial, PhaseDebate, PhaseFinalVote}[int(ph)%3]
		o, err := decodeRoundOutput(raw, "a", phase, 1)
		if err != nil {
			if o != nil {
				t.Fatalf("output returned with error")
			}
			return
		}
		if o.ParticipantID != "a" || o.Phase != phase || o.Round != 1 || o.FullResponse == "" || o.Summary == "" {
			t.Fatalf("accepted output not bound to its task: %+v", o)
		}
		if phase == PhaseFinalVote && len(o.ClaimVotes) == 0 || phase != PhaseFinalVote && o.ClaimVotes != nil {
			t.Fatalf("claimVotes rule broken: %+v", o)
		}
		if phase == PhaseInitial && (o.TaskTitle == "" || utf16Len(o.TaskTitle) > MaxTaskTitle) {
			t.Fatalf("taskTitle rule broken: %q", o.TaskTitle)
		}
		if _, err := json.Marshal(o); err != nil {
			t.Fatalf("accepted output does not encode: %v", err)
		}
	})
}

func FuzzDecodeState(f *testing.F) {
	s, _, _ := step(nil, Start(1, "s", mustRequest(f, minimalRequest)))
	f.Add(EncodeState(s))
	f.Add([]byte(stateMagic + "\x01"))
	// A mid-debate state with a catalog, so mutations reach the claim index
	// (duplicate ids, merge links).
	if fixture, err := os.ReadFile("testdata/state_v1.bin"); err == nil {
		f.Add(fixture)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeState(b)
		if err != nil {
			return
		}
		_ = s.OutstandingTasks()
		_ = s.Result()
		enc := EncodeState(s)
		if _, err := DecodeState(enc); err != nil {
			t.Fatalf("decoded state does not re-decode: %v", err)
		}
		if !s.Done() {
			if _, _, err := step(s, Cancel(0, "fuzz")); err != nil {
				t.Fatalf("cancel of a decoded state: %v", err)
			}
		}
	})
}
