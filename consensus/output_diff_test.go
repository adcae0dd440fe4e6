package consensus

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// diffSeeds are results chosen to hit the corners where a hand-written
// decoder could part from encoding/json: repeated members, case folding,
// null handling, stale slice elements, escapes, numbers, nesting, types.
var diffSeeds = []string{
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[]}}`,
	`null`, ` `, ``, `[]`, `"x"`, `12`, `true`, `{}`, `{"kind":"round"}`, `{"kind":null,"output":{}}`,
	`{"kind":"round","output":null}`, `{"kind":"round","output":[]}`, `{"kind":"round","output":{}} x`,
	`{"KIND":"round","Output":{"FULLRESPONSE":"f","ſummary":"s","judgements":[]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[{"claimId":"c","stance":"agree","confidence":0.5,"rationale":"r","ﬁ":1}]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"taskTitle":"t","extractedClaims":[{"title":"a","statement":"b","category":"risk","claimId":"x"},null]}}`,
	// Repeated members: objects merge, arrays reuse stale elements, null clears pointers only.
	`{"kind":"round","output":{"fullResponse":"f"},"output":{"summary":"s","judgements":[]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","summary":null,"judgements":[]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[{"claimId":"a","stance":"agree","confidence":1,"rationale":"r","revisedStatement":"x"},{"claimId":"b"}],"judgements":[{"claimId":"z"}]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[{"claimId":"a","stance":"agree","confidence":1,"rationale":"r"},{"claimId":"b","stance":"revise","confidence":0,"rationale":"q"}],"judgements":[{}],"judgements":[null,null]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[{"claimId":"a","stance":"agree","confidence":1,"rationale":"r"}],"judgements":[],"judgements":[null]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[{"claimId":"a","rationale":null,"rationale":"r","stance":"agree","stance":null,"confidence":1,"confidence":null}]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"claimVotes":[{"claimId":"a","vote":"accept","reason":"x"},{"claimId":"b","vote":"reject"}],"claimVotes":[{"reason":null}]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"claimVotes":[{"claimId":"a","vote":"accepT"}]}}`,
	// Strings and escapes.
	`{"kind":"r\u006fund","output":{"fullResponse":"\ud83d\ude00\n\t\"\\\/\b\f\r","summary":"\ud800\u0041\udc00x\ud800","judgements":[]}}`,
	`{"kind":"round","output":{"fullResponse":"\ud800\ud800\udc00","summary":"\u00e9","judgements":[]}}`,
	`{"kind":"round","output":{"fullResponse":"a\x","summary":"s","judgements":[]}}`,
	"{\"kind\":\"round\",\"output\":{\"fullResponse\":\"a\x01\",\"summary\":\"s\",\"judgements\":[]}}",
	`{"kind":"round","output":{"fullResponse":"\u12","summary":"s","judgements":[]}}`,
	`{"k\u0069nd":"round","out\u0070ut":{"fullResponse":"f","summary":"s","judgements":[]}}`,
	// Numbers.
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"round":1,"selfScore":-0}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"round":1.0e0,"selfScore":99.99999999999999999}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"selfScore":1e400}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"selfScore":1e-400}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"selfScore":01}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"selfScore":-}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"selfScore":1.}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[{"claimId":"c","stance":"agree","confidence":0.30000000000000004,"rationale":"r"},{"claimId":"c","stance":"agree","confidence":0.1234567890123456789,"rationale":"r"}]}}`,
	// Types.
	`{"kind":"round","output":{"fullResponse":1,"summary":"s","judgements":[]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":{}}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":["x"]}}`,
	`{"kind":"round","output":{"fullResponse":"f","summary":"s","judgements":[],"round":"1"}}`,
	`{"kind":true,"output":{"fullResponse":"f","summary":"s","judgements":[]}}`,
	// Unknown members of every type, and nesting.
	`{"kind":"round","x":[1,{"a":[true,false,null,"s",-1.5e+3]},[]],"output":{"y":{},"fullResponse":"f","summary":"s","judgements":[{"z":[[]],"claimId":"c","stance":"disagree","confidence":1,"rationale":"r"}]}}`,
	`{"kind":"round","x":[1,],"output":{}}`, `{"kind":"round","x":{"a"},"output":{}}`, `{"kind":"round",}`,
	`{"kind":"round","x":tru}`, `{"kind":"round","x":nulll}`,
}

func FuzzDecodeRoundOutput_Differential(f *testing.F) {
	for _, s := range diffSeeds {
		for ph := uint8(0); ph < 3; ph++ {
			f.Add([]byte(s), ph, uint8(1))
		}
	}
	deep := `{"kind":"round","x":` + strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1) + "}"
	f.Add([]byte(deep), uint8(0), uint8(1))
	f.Add([]byte(strings.Replace(deep, "[", "[[", 1)+"]"), uint8(0), uint8(1))
	_, script := benchScript(10)
	for _, answers := range script.Agents {
		for key, a := range answers {
			phase, round := PhaseInitial, 0
			switch {
			case key == "final_vote":
				phase, round = PhaseFinalVote, 4
			case strings.HasPrefix(key, "debate"):
				phase, round = PhaseDebate, int(key[len(key)-1]-'0')
			}
			raw, _ := wrapOutput(&Task{Kind: TaskRound, ParticipantID: "a", Phase: phase, Round: round}, a.Output)
			f.Add([]byte(raw), uint8(map[Phase]int{PhaseInitial: 0, PhaseDebate: 1, PhaseFinalVote: 2}[phase]), uint8(round))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, ph, round uint8) {
		phase := []Phase{PhaseInitial, PhaseDebate, PhaseFinalVote}[int(ph)%3]
		got, gerr := decodeRoundOutput(raw, "a", phase, int(round))
		want, werr := refDecodeRoundOutput(raw, "a", phase, int(round))
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("accept differs: new %v, reference %v", gerr, werr)
		}
		if gerr != nil {
			if gerr.Error() != werr.Error() {
				t.Fatalf("error differs:\nnew       %s\nreference %s", gerr, werr)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("value differs:\nnew       %+v\nreference %+v", got, want)
		}
		var a, b wbuf // the state encoding also compares float bits (-0)
		encodeOutput(&a, got)
		encodeOutput(&b, want)
		if !bytes.Equal(a.b, b.b) {
			t.Fatalf("encoded value differs")
		}
	})
}

func TestFieldTables(t *testing.T) {
	for _, tc := range []struct {
		names [][]byte
		index func([]byte) int
	}{
		{envelopeFields, envelopeField}, {outputFields, outputField}, {claimFields, claimField},
		{judgementFields, judgementField}, {voteFields, voteField},
	} {
		for i, n := range tc.names {
			if got := tc.index(n); got != i {
				t.Errorf("%s: switch gives %d, table %d", n, got, i)
			}
			if got := tc.index(bytes.ToUpper(n)); got != i {
				t.Errorf("%s: folded match gives %d, want %d", bytes.ToUpper(n), got, i)
			}
		}
		if got := tc.index([]byte("nope")); got != -1 {
			t.Errorf("unknown name matched %d", got)
		}
	}
}

func TestPlainRun(t *testing.T) {
	// Every position of every special byte, after every prefix length, in
	// words with and without high (UTF-8) bytes.
	for _, special := range []byte{'"', '\\', 0, 0x1f} {
		for _, fill := range []byte{'a', 0xc3, 0x20, 0x7f, 0xff} {
			for n := 0; n < 20; n++ {
				for at := 0; at <= n; at++ {
					in := bytes.Repeat([]byte{fill}, n)
					want := n
					if at < n {
						in[at] = special
						want = at
					}
					if got := plainRun(in, 0); got != want {
						t.Fatalf("plainRun(%q) = %d, want %d", in, got, want)
					}
				}
			}
		}
	}
}
