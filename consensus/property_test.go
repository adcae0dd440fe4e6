package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// chaosAgent answers deterministically from (seed, task id): sometimes well,
// sometimes late, wrong, malformed or silent.
type chaosAgent struct{ seed uint64 }

func (c chaosAgent) rng(t *Task) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(t.ID))
	return rand.New(rand.NewPCG(c.seed, h.Sum64()))
}

func (c chaosAgent) LatencyMs(t *Task) int64 {
	r := c.rng(t)
	if r.IntN(30) == 0 {
		return -1 // never answers
	}
	return int64(r.IntN(1500))
}

func (c chaosAgent) Handle(_ context.Context, t *Task) (json.RawMessage, error) {
	r := c.rng(t)
	r.IntN(30) // keep in step with LatencyMs
	r.IntN(1500)
	switch r.IntN(30) {
	case 0:
		return nil, fmt.Errorf("agent crashed")
	case 1:
		return json.RawMessage(randomJSON(r, 3)), nil
	case 2:
		return []byte{0xff, '{', '}'}, nil
	}
	raw, err := Persona{}.Answer(t)
	if err != nil || t.Kind != TaskRound || r.IntN(3) != 0 {
		return raw, err
	}
	// Perturb a valid answer: extra claims, merges and votes on random ids.
	var env struct {
		Kind   string         `json:"kind"`
		Output map[string]any `json:"output"`
	}
	_ = json.Unmarshal(raw, &env)
	ids := []string{"nope", "seed:a:0"}
	for _, cl := range t.ClaimCatalog {
		ids = append(ids, cl.ClaimID)
	}
	pickID := func() string { return ids[r.IntN(len(ids))] }
	js := []any{}
	for i := 0; i < r.IntN(5); i++ {
		jd := map[string]any{"claimId": pickID(), "stance": []string{"agree", "disagree", "revise"}[r.IntN(3)],
			"confidence": r.Float64(), "rationale": "r"}
		if r.IntN(2) == 0 {
			jd["mergesWith"] = pickID()
		}
		if r.IntN(2) == 0 {
			jd["revisedStatement"] = "rev"
		}
		js = append(js, jd)
	}
	if len(js) > 0 || t.Phase != PhaseDebate {
		env.Output["judgements"] = js
	}
	if t.Phase != PhaseFinalVote || r.IntN(2) == 0 {
		env.Output["extractedClaims"] = []any{map[string]any{"title": "new", "statement": "s"}}
	}
	if t.Phase == PhaseFinalVote {
		env.Output["claimVotes"] = []any{map[string]any{"claimId": pickID(), "vote": "accept"},
			map[string]any{"claimId": pickID(), "vote": "reject"}}
	}
	if r.IntN(8) == 0 {
		env.Output["round"] = t.Round + 1
	}
	return json.Marshal(env)
}

func randomJSON(r *rand.Rand, depth int) string {
	switch k := r.IntN(7); {
	case depth == 0 || k == 0:
		return []string{`null`, `true`, `1e999`, `"x"`, `-0`, `"\ud800"`}[r.IntN(6)]
	case k < 4:
		keys := []string{"kind", "output", "phase", "round", "judgements", "claimVotes", "summary", "fullResponse", "taskTitle"}
		var parts []string
		for i := 0; i < r.IntN(5); i++ {
			parts = append(parts, fmt.Sprintf("%q:%s", keys[r.IntN(len(keys))], randomJSON(r, depth-1)))
		}
		return "{" + strings.Join(parts, ",") + "}"
	default:
		var parts []string
		for i := 0; i < r.IntN(4); i++ {
			parts = append(parts, randomJSON(r, depth-1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
}

type chaosDir struct{ seed uint64 }

func (d chaosDir) Agent(string) (Agent, bool) { return chaosAgent{seed: d.seed}, true }

func drawRequest(t *rapid.T) *Request {
	n := rapid.IntRange(2, 5).Draw(t, "participants")
	var ps []string
	for i := 0; i < n; i++ {
		ps = append(ps, fmt.Sprintf(`{"id":"%c"}`, 'a'+i))
	}
	minR := rapid.IntRange(0, 2).Draw(t, "minRounds")
	maxR := rapid.IntRange(max(1, minR), 3).Draw(t, "maxRounds")
	raw := fmt.Sprintf(`{"requestId":"r","task":"T","participants":[%s],
	 "participantsPolicy":{"minParticipants":2,"onInsufficientParticipants":%q},
	 "roundPolicy":{"minRounds":%d,"maxRounds":%d},"consensusPolicy":{"threshold":%v},
	 "scoringPolicy":{"tieBreaker":%q},
	 "reportPolicy":{"composer":%q,"includeDeliberationTrace":%v},
	 "waitingPolicy":{"perTaskTimeoutMs":3000,"perRoundTimeoutMs":%d%s}%s}`,
		strings.Join(ps, ","), rapid.SampledFrom([]string{"interrupt", "fail"}).Draw(t, "policy"), minR, maxR,
		rapid.SampledFrom([]float64{0, 0.5, 0.6, 1}).Draw(t, "threshold"),
		rapid.SampledFrom([]string{TieBreakLatestRound, TieBreakLeastObjection}).Draw(t, "tie"),
		rapid.SampledFrom([]string{"builtin", "representative"}).Draw(t, "composer"), rapid.Bool().Draw(t, "trace"),
		rapid.IntRange(1000, 6000).Draw(t, "perRound"),
		rapid.SampledFrom([]string{"", `,"globalDeadlineMs":9000`}).Draw(t, "deadline"),
		rapid.SampledFrom([]string{"", `,"actionPolicy":{"prompt":"act"}`}).Draw(t, "action"))
	req, err := ParseRequest([]byte(raw))
	if err != nil {
		t.Fatalf("generated request invalid: %v", err)
	}
	return req
}

func chaosRun(t *rapid.T) (*Outcome, *Request) {
	req := drawRequest(t)
	seed := rapid.Uint64().Draw(t, "seed")
	run, err := Simulate(context.Background(), req, chaosDir{seed}, SimOptions{SessionID: "p", StartMs: 5000})
	if err != nil {
		t.Fatalf("Simulate: %v", err)
	}
	if run.Result == nil && run.Failure == nil {
		t.Fatalf("run ended without outcome")
	}
	return run, req
}

func outcomeJSON(run *Outcome) []byte {
	b, _ := json.Marshal(struct {
		R *Result
		F *Failure
		E []Event
	}{run.Result, run.Failure, run.Events})
	return b
}

func TestProperty_DeterministicAndReplayable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		run, _ := chaosRun(t)
		// Determinism: the same inputs give byte-identical states and outcomes.
		s2, _ := replay(t, nil, run.Inputs)
		if !bytes.Equal(EncodeState(s2), EncodeState(run.State)) {
			t.Fatalf("replayed state differs")
		}
		// Replay from an encoded snapshot at any step gives the same outcome.
		cut := rapid.IntRange(1, len(run.Inputs)).Draw(t, "cut")
		mid, _ := replay(t, nil, run.Inputs[:cut])
		dec, err := DecodeState(EncodeState(mid))
		if err != nil {
			t.Fatalf("decode at %d: %v", cut, err)
		}
		end, fin := replay(t, dec, run.Inputs[cut:])
		if !bytes.Equal(EncodeState(end), EncodeState(run.State)) {
			t.Fatalf("state after snapshot at %d differs", cut)
		}
		if cut < len(run.Inputs) {
			got := &Outcome{Result: fin.Result, Failure: fin.Failure, Events: run.Events}
			if !bytes.Equal(outcomeJSON(got), outcomeJSON(run)) {
				t.Fatalf("outcome after snapshot at %d differs", cut)
			}
		}
	})
}

func TestProperty_FinalVoteNeverAddsClaims(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		run, _ := chaosRun(t)
		var s *State
		var before []Claim
		for _, in := range run.Inputs {
			s, _, _ = step(s, in)
			if s.cur != nil && s.cur.phase == PhaseFinalVote && before == nil {
				before = append([]Claim{}, s.catalog...)
			}
		}
		if before == nil || run.Result == nil {
			return
		}
		a, _ := json.Marshal(before)
		b, _ := json.Marshal(run.Result.FinalClaims)
		if !bytes.Equal(a, b) {
			t.Fatalf("final vote changed the catalog:\n%s\n%s", a, b)
		}
		for _, e := range run.Events {
			if p, ok := e.Payload.(*RoundCompletedPayload); ok && p.Phase == PhaseFinalVote && (p.NewClaims != 0 || p.MergeCount != 0) {
				t.Fatalf("final vote round completed with changes: %+v", p)
			}
		}
	})
}

func TestProperty_ArbitraryOutputsNeverPanic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		req := drawRequest(t)
		s, _, err := step(nil, Start(0, "x", req))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 60 && !s.Done(); i++ {
			tasks := s.OutstandingTasks()
			if len(tasks) == 0 {
				t.Fatalf("running state with no outstanding task")
			}
			task := tasks[rapid.IntRange(0, len(tasks)-1).Draw(t, "task")]
			var in Input
			switch rapid.IntRange(0, 3).Draw(t, "kind") {
			case 0:
				in = TaskResult(int64(i), task.ID, task.ParticipantID, rapid.SliceOf(rapid.Byte()).Draw(t, "bytes"))
			case 1:
				r := rand.New(rand.NewPCG(uint64(i), rapid.Uint64().Draw(t, "seed")))
				in = TaskResult(int64(i), task.ID, task.ParticipantID, []byte(randomJSON(r, 4)))
			case 2:
				raw, _ := Persona{}.Answer(task)
				in = TaskResult(int64(i), task.ID, task.ParticipantID, raw)
			default:
				in = TimerFired(task.TimeoutAt, task.ID)
			}
			var err error
			s, _, err = step(s, in)
			if err != nil {
				t.Fatalf("step: %v", err)
			}
			if _, err := DecodeState(EncodeState(s)); err != nil {
				t.Fatalf("state does not survive encoding: %v", err)
			}
		}
	})
}
