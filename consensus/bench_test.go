package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// benchScript scripts 5 agents over `claims` claims: each proposes
// claims/5 in the initial round, judges 10 claims (one objection, so no early
// stop) in each of 3 debate rounds, and votes on every claim.
func benchScript(claims int) (*Request, *Script) {
	ids := []string{"p1", "p2", "p3", "p4", "p5"}
	req := mustRequest(nil, `{"requestId":"bench","task":"Benchmark the engine.",
	 "participants":[{"id":"p1"},{"id":"p2"},{"id":"p3"},{"id":"p4"},{"id":"p5"}],
	 "roundPolicy":{"minRounds":3,"maxRounds":3},"consensusPolicy":{"threshold":0.6}}`)
	s := &Script{Version: 1, Agents: map[string]map[string]Answer{}}
	per := claims / len(ids)
	var all []string
	for _, id := range ids {
		for k := 0; k < per; k++ {
			all = append(all, fmt.Sprintf("%s:0:%d", id, k))
		}
	}
	for pi, id := range ids {
		var cl, votes []any
		for k := 0; k < per; k++ {
			cl = append(cl, claim(fmt.Sprintf("claim %d of %s", k, id)))
		}
		for k, c := range all {
			vote := "accept"
			if (k+pi)%7 == 0 {
				vote = "reject"
			}
			votes = append(votes, v(c, vote))
		}
		a := map[string]Answer{
			"initial":    out(id, map[string]any{"taskTitle": "bench", "extractedClaims": cl}),
			"final_vote": out(id, map[string]any{"claimVotes": votes}),
		}
		for r := 1; r <= 3; r++ {
			var js []any
			for k := 0; k < 10; k++ {
				c := all[(pi*37+r*11+k*13)%len(all)]
				stance := "agree"
				if k == 0 {
					stance = "disagree"
				}
				js = append(js, j(c, stance))
			}
			a[fmt.Sprintf("debate:%d", r)] = out(id, map[string]any{"judgements": js})
		}
		s.Agents[id] = a
	}
	return req, s
}

func benchRun(b *testing.B, claims int) *Outcome {
	req, s := benchScript(claims)
	run, err := Simulate(context.Background(), req, s, SimOptions{SessionID: "bench"})
	if err != nil || run.Result == nil || len(run.Result.FinalClaims) != claims {
		b.Fatalf("bench run: %v %+v", err, run.Failure)
	}
	return run
}

// BenchmarkStep_5Agents200Claims3Rounds replays a whole run (start, 25 agent
// results, finalisation) through Step, with the agents' results in three
// forms:
//   - typed: parsed at the edge beforehand (ParseRoundResult), so Step does
//     only the task binding and the engine's work (issue 3's figure);
//   - binary: decoded from their Raft-log form (DecodeRoundResult) and
//     stepped, what a replica's Apply does per input;
//   - raw_json: the agents' raw JSON, parsed inside Step: edge parse + Step,
//     the whole cost of an answer.
func BenchmarkStep_5Agents200Claims3Rounds(b *testing.B) {
	run := benchRun(b, 200)
	typed := edgeInputs(b, run.Inputs)
	bins := make([][]byte, len(typed))
	for i, in := range typed {
		if in.Parsed != nil {
			bins[i], _ = in.Parsed.MarshalBinary()
		}
	}
	b.Run("typed", func(b *testing.B) { benchReplay(b, typed, nil) })
	b.Run("binary", func(b *testing.B) { benchReplay(b, typed, bins) })
	b.Run("raw_json", func(b *testing.B) { benchReplay(b, run.Inputs, nil) })
}

// benchReplay replays inputs per op; with bins, each round result is
// first decoded from bins[i].
func benchReplay(b *testing.B, inputs []Input, bins [][]byte) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		if bins == nil {
			replay(b, nil, inputs)
			continue
		}
		var s *State
		for k, in := range inputs {
			if bins[k] != nil {
				rr, err := DecodeRoundResult(bins[k])
				if err != nil {
					b.Fatal(err)
				}
				in.Parsed = rr
			}
			var err error
			if s, _, err = step(s, in); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportRate(b, len(inputs), cpu)
}

// reportRate reports inputs/s (wall clock) and the process CPU time per op,
// which includes the garbage collector's work on the other core.
func reportRate(b *testing.B, inputs int, cpuStart int64) {
	b.ReportMetric(float64(processCPU()-cpuStart)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(inputs*b.N)/b.Elapsed().Seconds(), "inputs/s")
}

// jsonMirror exposes the state's content with exported fields, so
// encoding/json can serve as the baseline codec.
type jsonMirror struct {
	SessionID    string
	Request      *Request
	StartedAt    int64
	Active       []bool
	Eliminations []Elimination
	Catalog      []Claim
	Rounds       []RoundRecord
	Report       *FinalReport
	Action       *ActionOutput
	Counters     [3]int
}

func mirror(s *State) *jsonMirror {
	return &jsonMirror{SessionID: s.sessionID, Request: s.req, StartedAt: s.startedAt, Active: s.active,
		Eliminations: s.eliminations, Catalog: s.catalog, Rounds: s.rounds, Report: s.report, Action: s.action,
		Counters: [3]int{s.totalTurns, s.waitTimeouts, int(s.eventCount)}}
}

// BenchmarkStep_BaselineJSON is the reference point for
// BenchmarkStep_5Agents200Claims3Rounds, run in the same invocation so the
// ratio survives a loaded machine: per op it decodes every agent output of
// the same run with plain encoding/json (no validation, no reducer) and
// marshals the final 200-claim state once with encoding/json, the cost of a
// naive JSON-in, JSON-snapshot design.
func BenchmarkStep_BaselineJSON(b *testing.B) {
	run := benchRun(b, 200)
	m := mirror(run.State)
	type envelope struct {
		Kind   string `json:"kind"`
		Output Output `json:"output"`
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		for _, in := range run.Inputs {
			if in.Kind != InputTaskResult {
				continue
			}
			var env envelope
			if err := json.Unmarshal(in.Output, &env); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, len(run.Inputs), cpu)
}

func BenchmarkEncodeState_1000Claims(b *testing.B) {
	s := benchRun(b, 1000).State
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = EncodeState(s)
	}
	b.ReportMetric(float64(len(EncodeState(s))), "bytes")
}

func BenchmarkDecodeState_1000Claims(b *testing.B) {
	enc := EncodeState(benchRun(b, 1000).State)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeState(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode_BaselineJSONMarshal_1000Claims(b *testing.B) {
	m := mirror(benchRun(b, 1000).State)
	b.ReportAllocs()
	b.ResetTimer()
	var n int
	for i := 0; i < b.N; i++ {
		out, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.ReportMetric(float64(n), "bytes")
}

func BenchmarkDecode_BaselineJSONUnmarshal_1000Claims(b *testing.B) {
	raw, err := json.Marshal(mirror(benchRun(b, 1000).State))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var m jsonMirror
		if err := json.Unmarshal(raw, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// finalVoteRaw returns the raw result of p1's final vote in the 200-claim
// benchmark run (~14 KB, 200 votes) and its task's round.
func finalVoteRaw(b *testing.B) ([]byte, int) {
	_, script := benchScript(200)
	raw, err := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "p1", Phase: PhaseFinalVote, Round: 4},
		script.Agents["p1"]["final_vote"].Output)
	if err != nil {
		b.Fatal(err)
	}
	return raw, 4
}

func BenchmarkDecodeRoundOutput_FinalVote200(b *testing.B) {
	raw, round := finalVoteRaw(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := decodeRoundOutput(raw, "p1", PhaseFinalVote, round); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkDecodeRoundOutput_BaselineReference is the encoding/json decoder
// decodeRoundOutput replaced (output_ref_test.go), on the same result.
func BenchmarkDecodeRoundOutput_BaselineReference(b *testing.B) {
	raw, round := finalVoteRaw(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := refDecodeRoundOutput(raw, "p1", PhaseFinalVote, round); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkDecodeRoundResult_FinalVote200 decodes the binary form of the
// same final vote, what a replica's Apply does instead of parsing JSON.
func BenchmarkDecodeRoundResult_FinalVote200(b *testing.B) {
	raw, _ := finalVoteRaw(b)
	bin, _ := ParseRoundResult(raw).MarshalBinary()
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeRoundResult(bin); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(bin)), "entry-bytes")
	b.ReportMetric(float64(len(raw)), "json-bytes")
}
