package consensus

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
)

// roundTaskID matches the id of a round task (`<sid>/r<round>/<pid>`).
var roundTaskID = regexp.MustCompile(`/r[0-9]+/`)

// edgeInputs converts every round-task result to the form the edge
// proposes: parsed once, carried in binary, decoded by the applier.
func edgeInputs(t testing.TB, inputs []Input) []Input {
	out := make([]Input, len(inputs))
	for i, in := range inputs {
		out[i] = in
		if in.Kind != InputTaskResult || !roundTaskID.MatchString(in.TaskID) {
			continue
		}
		b, err := ParseRoundResult(in.Output).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		rr, err := DecodeRoundResult(b)
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		out[i] = TaskRoundResult(in.At, in.TaskID, in.ParticipantID, rr)
	}
	return out
}

// The chaos runs replayed with parsed, binary-carried round results give
// byte-identical states, effects, events and error texts (the golden file
// was written by the raw-JSON path).
func TestRoundResult_ChaosDigestsThroughBinary(t *testing.T) {
	got := chaosDigests(t, func(in []Input) []Input { return edgeInputs(t, in) })
	want, err := os.ReadFile(filepath.Join("testdata", "chaos_digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("parsed round results change the chaos runs")
	}
}

func TestRoundResult_Cases(t *testing.T) {
	initial := []byte(`{"kind":"round","output":{"fullResponse":"f","summary":"s","taskTitle":"T","judgements":[],
		"extractedClaims":[{"title":"a","statement":"b","category":"risk"}]}}`)
	vote := []byte(`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],
		"claimVotes":[{"claimId":"é:0:1","vote":"accept"},{"claimId":"è:0:1","vote":"reject","reason":"r"}]}}`)
	cases := []struct {
		name  string
		raw   []byte
		phase Phase
		want  string // error, "" for accepted
	}{
		{"initial ok", initial, PhaseInitial, ""},
		{"debate keeps no title", initial, PhaseDebate, ""},
		{"votes in debate", vote, PhaseDebate, "invalid_round_result: output.claimVotes must be absent in the debate phase"},
		{"votes in final vote", vote, PhaseFinalVote, ""},
		{"no votes in final vote", initial, PhaseFinalVote, "invalid_round_result: output.claimVotes must have at least 1 entry"},
		{"no title in initial", vote, PhaseInitial, "invalid_round_result: output.taskTitle is required"},
		{"not json", []byte(`{`), PhaseDebate, "invalid_round_result: unexpected end of JSON input"},
		{"wrong kind", []byte(`{"kind":"report","output":{}}`), PhaseDebate, `invalid_round_result: kind must be "round"`},
		{"wrong phase", []byte(`{"kind":"round","output":{"phase":"initial"}}`), PhaseDebate,
			`invalid_round_result: output.phase "initial" does not match the task's phase "debate"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, werr := decodeRoundOutput(c.raw, "a", c.phase, 1)
			b, _ := ParseRoundResult(c.raw).MarshalBinary()
			rr, err := DecodeRoundResult(b)
			if err != nil {
				t.Fatal(err)
			}
			got, gerr := rr.bind("a", c.phase, 1)
			if errText(gerr) != c.want || errText(werr) != c.want {
				t.Fatalf("errors %q (binary) and %q (raw), want %q", errText(gerr), errText(werr), c.want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("outputs differ:\n%+v\n%+v", got, want)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestRoundResult_BinaryIsSmall(t *testing.T) {
	raw, _ := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "p1", Phase: PhaseFinalVote, Round: 4},
		benchFinalVote())
	b, _ := ParseRoundResult(raw).MarshalBinary()
	if len(b)*2 > len(raw) {
		t.Fatalf("binary form %d bytes for %d bytes of JSON", len(b), len(raw))
	}
}

// benchFinalVote is p1's 200-vote final vote of the Step benchmark.
func benchFinalVote() []byte {
	_, script := benchScript(200)
	return script.Agents["p1"]["final_vote"].Output
}

func TestRoundResult_JSONRoundTrip(t *testing.T) {
	raw, _ := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "p1", Phase: PhaseFinalVote, Round: 4},
		benchFinalVote())
	in := TaskRoundResult(5, "s/r4/p1", "p1", ParseRoundResult(raw))
	b, err := in.Parsed.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back RoundResult
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, in.Parsed) {
		t.Fatal("JSON round trip changed the result")
	}
}

func TestDecodeRoundResult_RejectsCorruption(t *testing.T) {
	raw, _ := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "p1", Phase: PhaseFinalVote, Round: 4},
		benchFinalVote())
	good, _ := ParseRoundResult(raw).MarshalBinary()
	cases := map[string][]byte{
		"empty":     nil,
		"version 2": append([]byte{2}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"bad flags": append([]byte{1, 0xff}, good[2:]...),
	}
	for name, b := range cases {
		if _, err := DecodeRoundResult(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// roundResultSeeds are raw results covering every group of checks.
func roundResultSeeds() [][]byte {
	seeds := [][]byte{
		[]byte(`{"kind":"round","output":{"fullResponse":"x","summary":"y","judgements":[],"selfScore":1e308}}`),
		[]byte(`{"kind":"round","output":{"participantId":"b","phase":"debate","round":1.5,"fullResponse":"","summary":"y"}}`),
		[]byte(`{"kind":"round","output":{"fullResponse":"x","summary":"y","taskTitle":"` + long("t", 70) + `","judgements":[{"claimId":"é","stance":"revise","confidence":1,"rationale":"r","mergesWith":"è","revisedStatement":"s"}]}}`),
		[]byte(`{"kind":"round","output":{"fullResponse":"x","summary":"y","judgements":null,"claimVotes":[{"claimId":"a","vote":"maybe"}]}}`),
		[]byte(`{"kind":"round","output":null}`),
	}
	for _, a := range []Answer{
		out("a", map[string]any{"taskTitle": "t", "extractedClaims": []any{claim("c")}}),
		out("a", map[string]any{"judgements": []any{j("a:0:0", "revise", "mergesWith", "b:0:0", "revisedStatement", "x")}}),
		out("a", map[string]any{"claimVotes": []any{v("a:0:0", "accept"), v("a:0:1", "reject")}}),
	} {
		raw, _ := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "a", Phase: PhaseDebate, Round: 1}, a.Output)
		seeds = append(seeds, raw)
	}
	return seeds
}

// FuzzRoundResult_BinaryMatchesRaw: for any raw result and task, the
// parsed result carried in binary binds exactly as the raw JSON does
// (same acceptance, error text and output).
func FuzzRoundResult_BinaryMatchesRaw(f *testing.F) {
	for i, s := range roundResultSeeds() {
		f.Add(s, uint8(i))
	}
	f.Fuzz(func(t *testing.T, raw []byte, sel uint8) {
		phase := []Phase{PhaseInitial, PhaseDebate, PhaseFinalVote}[int(sel)%3]
		round := int(sel/3) % 3
		want, werr := decodeRoundOutput(raw, "a", phase, round)
		b, err := ParseRoundResult(raw).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		rr, err := DecodeRoundResult(b)
		if err != nil {
			t.Fatalf("binary form does not decode: %v", err)
		}
		got, gerr := rr.bind("a", phase, round)
		if errText(gerr) != errText(werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("binary %q %+v\nraw    %q %+v", errText(gerr), got, errText(werr), want)
		}
		if again, _ := rr.MarshalBinary(); !bytes.Equal(again, b) {
			t.Fatal("re-encoding differs")
		}
	})
}

// FuzzDecodeRoundResult: log bytes never panic the decoder, and whatever
// it accepts re-encodes to an equal value and binds like a parsed result.
func FuzzDecodeRoundResult(f *testing.F) {
	for _, s := range roundResultSeeds() {
		b, _ := ParseRoundResult(s).MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{1, rrFatal, 1, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		rr, err := DecodeRoundResult(b)
		if err != nil {
			return
		}
		enc, _ := rr.MarshalBinary()
		back, err := DecodeRoundResult(enc)
		if err != nil || !reflect.DeepEqual(back, rr) {
			t.Fatalf("re-encoded result differs: %v", err)
		}
		for _, phase := range []Phase{PhaseInitial, PhaseDebate, PhaseFinalVote} {
			o, err := rr.bind("a", phase, 1)
			if err != nil {
				continue
			}
			if o.FullResponse == "" || o.Summary == "" || o.Judgements == nil ||
				phase == PhaseFinalVote && len(o.ClaimVotes) == 0 || phase != PhaseFinalVote && o.ClaimVotes != nil ||
				phase == PhaseInitial && o.TaskTitle == "" {
				t.Fatalf("accepted output breaks the schema: %+v", o)
			}
		}
	})
}

// A parsed round result answers only round tasks: sent for a report task
// it is ignored and changes nothing.
func TestRoundResult_NotForReportTasks(t *testing.T) {
	h := newHarness(t, mustRequest(t, `{"requestId":"r","task":"T","participants":[{"id":"a"},{"id":"b"}],
		"roundPolicy":{"minRounds":0,"maxRounds":1},"reportPolicy":{"composer":"representative"}}`))
	for ids := h.pending(); len(ids) > 0 && h.tasks[ids[0]].Kind == TaskRound; ids = h.pending() {
		for _, id := range ids {
			raw, _ := Persona{}.Answer(h.tasks[id])
			if err := h.step(TaskRoundResult(h.now, id, h.tasks[id].ParticipantID, ParseRoundResult(raw))); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := h.pending()
	if len(ids) != 1 || h.tasks[ids[0]].Kind != TaskReport {
		t.Fatalf("pending %v, want the report task", ids)
	}
	before := EncodeState(h.s)
	rr := ParseRoundResult([]byte(`{"kind":"report","output":{}}`))
	if err := h.step(TaskRoundResult(h.now, ids[0], h.tasks[ids[0]].ParticipantID, rr)); !errors.Is(err, ErrIgnored) {
		t.Fatalf("parsed result for a report task: %v", err)
	}
	if !bytes.Equal(EncodeState(h.s), before) {
		t.Fatal("an ignored input changed the state")
	}
}
