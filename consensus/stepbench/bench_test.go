package stepbench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/concordmap/concord/consensus"
)

// The run matches consensus's benchScript(200): 5 agents propose 40 claims
// each, judge 10 claims (one objection, so no early stop) in each of 3
// debate rounds, and vote on every claim.
const (
	agents   = 5
	perAgent = 40
)

func long(p string, n int) string { return strings.Repeat(p+" ", n/len(p)+1)[:n] }

// answer is output content with saturated lengths, as consensus's tests
// write them.
func answer(who string, fields map[string]any) consensus.Answer {
	m := map[string]any{"fullResponse": long(who, 200), "summary": long("summary "+who, 90), "judgements": []any{}}
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return consensus.Answer{Output: b}
}

func benchScript(tb testing.TB) (*consensus.Request, *consensus.Script) {
	req, err := consensus.ParseRequest([]byte(`{"requestId":"bench","task":"Benchmark the engine.",
	 "participants":[{"id":"p1"},{"id":"p2"},{"id":"p3"},{"id":"p4"},{"id":"p5"}],
	 "roundPolicy":{"minRounds":3,"maxRounds":3},"consensusPolicy":{"threshold":0.6}}`))
	if err != nil {
		tb.Fatal(err)
	}
	s := &consensus.Script{Version: 1, Agents: map[string]map[string]consensus.Answer{}}
	var all []string
	for a := 1; a <= agents; a++ {
		for k := 0; k < perAgent; k++ {
			all = append(all, fmt.Sprintf("p%d:0:%d", a, k))
		}
	}
	for pi := 0; pi < agents; pi++ {
		id := fmt.Sprintf("p%d", pi+1)
		var claims, votes []any
		for k := 0; k < perAgent; k++ {
			t := fmt.Sprintf("claim %d of %s", k, id)
			claims = append(claims, map[string]any{"title": t, "statement": "statement of " + t, "category": "pro"})
		}
		for k, c := range all {
			vote := consensus.VoteAccept
			if (k+pi)%7 == 0 {
				vote = consensus.VoteReject
			}
			votes = append(votes, map[string]any{"claimId": c, "vote": vote, "reason": vote + " " + c})
		}
		a := map[string]consensus.Answer{
			"initial":    answer(id, map[string]any{"taskTitle": "bench", "extractedClaims": claims}),
			"final_vote": answer(id, map[string]any{"claimVotes": votes}),
		}
		for r := 1; r <= 3; r++ {
			var js []any
			for k := 0; k < 10; k++ {
				c := all[(pi*37+r*11+k*13)%len(all)]
				stance := consensus.StanceAgree
				if k == 0 {
					stance = consensus.StanceDisagree
				}
				js = append(js, map[string]any{"claimId": c, "stance": stance, "confidence": 0.9, "rationale": "because " + c})
			}
			a[fmt.Sprintf("debate:%d", r)] = answer(id, map[string]any{"judgements": js})
		}
		s.Agents[id] = a
	}
	return req, s
}

// edgeInputs runs the script once and returns its inputs with every round
// result parsed at the edge, as node/runs proposes them, and the binary
// log form of each (nil for other inputs).
func edgeInputs(b *testing.B) ([]consensus.Input, [][]byte) {
	req, script := benchScript(b)
	run, err := consensus.Simulate(context.Background(), req, script, consensus.SimOptions{SessionID: "bench"})
	if err != nil || run.Result == nil || len(run.Result.FinalClaims) != agents*perAgent {
		b.Fatalf("bench run: %v", err)
	}
	ins := make([]consensus.Input, len(run.Inputs))
	bins := make([][]byte, len(run.Inputs))
	for i, in := range run.Inputs {
		ins[i] = in
		if in.Kind != consensus.InputTaskResult || !strings.Contains(in.TaskID, "/r") {
			continue
		}
		rr := consensus.ParseRoundResult(in.Output)
		if bins[i], err = rr.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
		ins[i] = consensus.TaskRoundResult(in.At, in.TaskID, in.ParticipantID, rr)
	}
	return ins, bins
}

// BenchmarkStep_5Agents200Claims3Rounds replays the run per op, with round
// results parsed at the edge (typed, issue 3's figure) or decoded from
// their log form first (binary).
func BenchmarkStep_5Agents200Claims3Rounds(b *testing.B) {
	ins, bins := edgeInputs(b)
	b.Run("typed", func(b *testing.B) { replay(b, ins, nil) })
	b.Run("binary", func(b *testing.B) { replay(b, ins, bins) })
}

func replay(b *testing.B, ins []consensus.Input, bins [][]byte) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		var s *consensus.State
		for k, in := range ins {
			if bins != nil && bins[k] != nil {
				rr, err := consensus.DecodeRoundResult(bins[k])
				if err != nil {
					b.Fatal(err)
				}
				in.Parsed = rr
			}
			var fx []consensus.Effect
			var err error
			if s == nil {
				s, fx, err = consensus.NewState(in)
			} else {
				fx, err = s.Apply(in)
			}
			if err != nil {
				b.Fatal(err)
			}
			if k == len(ins)-1 && !s.Done() {
				b.Fatalf("run not finished after its last input (%d effects)", len(fx))
			}
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(ins)*b.N)/b.Elapsed().Seconds(), "inputs/s")
}

// BenchmarkStep_BaselineJSON is the same naive reference as consensus's
// own, in this binary so the ratio holds under the same conditions: per
// op, every agent output of the run decoded with plain encoding/json (no
// validation, no reducer) and the run's result marshalled once.
func BenchmarkStep_BaselineJSON(b *testing.B) {
	req, script := benchScript(b)
	run, err := consensus.Simulate(context.Background(), req, script, consensus.SimOptions{SessionID: "bench"})
	if err != nil || run.Result == nil {
		b.Fatalf("bench run: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		for _, in := range run.Inputs {
			if in.Kind != consensus.InputTaskResult {
				continue
			}
			var out map[string]any
			if err := json.Unmarshal(in.Output, &out); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := json.Marshal(run.Result); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(run.Inputs)*b.N)/b.Elapsed().Seconds(), "inputs/s")
}
