package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// long returns a deterministic text of at least n characters.
func long(tag string, n int) string {
	var b strings.Builder
	for b.Len() < n {
		fmt.Fprintf(&b, "%s explains the reasoning in detail. ", tag)
	}
	return b.String()
}

func j(claimID, stance string, extra ...string) map[string]any {
	m := map[string]any{"claimId": claimID, "stance": stance, "confidence": 0.9, "rationale": "because " + claimID}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func v(claimID, vote string) map[string]any {
	return map[string]any{"claimId": claimID, "vote": vote, "reason": vote + " " + claimID}
}

func claim(title string) map[string]any {
	return map[string]any{"title": title, "statement": "statement of " + title, "category": "pro"}
}

// out builds output content with saturated lengths (spec §21's assumption).
func out(who string, fields map[string]any) Answer {
	m := map[string]any{"fullResponse": long(who, 200), "summary": long("summary "+who, 90), "judgements": []any{}}
	for k, val := range fields {
		m[k] = val
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return Answer{Output: b}
}

func mustRequest(t testing.TB, raw string) *Request {
	r, err := ParseRequest([]byte(raw))
	if err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatalf("ParseRequest: %v", err)
	}
	return r
}

// step feeds one input as every driver does: NewState for the first input
// of a run (s nil), Apply in place after that.
func step(s *State, in Input) (*State, []Effect, error) {
	if s == nil {
		return NewState(in)
	}
	fx, err := s.Apply(in)
	return s, fx, err
}

func runScript(t testing.TB, req *Request, s *Script) *Outcome {
	t.Helper()
	run, err := Simulate(context.Background(), req, s, SimOptions{SessionID: "s1", StartMs: 1_700_000_000_000})
	if err != nil {
		t.Fatalf("Simulate: %v", err)
	}
	return run
}

// workedExample is the scripted run of spec §21.
func workedExample() *Script {
	return &Script{Version: 1, Agents: map[string]map[string]Answer{
		"p1": {
			"initial":  out("p1", map[string]any{"taskTitle": "Title by p1", "extractedClaims": []any{claim("X")}}),
			"debate:1": out("p1", map[string]any{"judgements": []any{j("p2:0:0", "agree"), j("p3:0:0", "agree")}}),
			"debate:2": out("p1", map[string]any{"judgements": []any{j("p1:0:0", "agree"), j("p2:0:0", "agree")}}),
			"final_vote": out("p1", map[string]any{"judgements": []any{j("p1:0:0", "agree"), j("p2:0:0", "agree")},
				"claimVotes": []any{v("p1:0:0", "accept"), v("p2:0:0", "accept")}}),
		},
		"p2": {
			"initial":  out("p2", map[string]any{"taskTitle": "Title by p2", "extractedClaims": []any{claim("Y")}}),
			"debate:1": out("p2", map[string]any{"judgements": []any{j("p1:0:0", "disagree"), j("p3:0:0", "agree")}}),
			"debate:2": out("p2", map[string]any{"judgements": []any{j("p1:0:0", "agree"), j("p2:0:0", "agree")}}),
			"final_vote": out("p2", map[string]any{"judgements": []any{j("p1:0:0", "disagree"), j("p2:0:0", "agree")},
				"claimVotes": []any{v("p1:0:0", "reject"), v("p2:0:0", "accept")}}),
		},
		"p3": {
			"initial": out("p3", map[string]any{"taskTitle": "Title by p3", "extractedClaims": []any{claim("Y'")}}),
			"debate:1": out("p3", map[string]any{"judgements": []any{j("p3:0:0", "revise", "mergesWith", "p2:0:0"),
				j("p1:0:0", "agree")}}),
			"debate:2": out("p3", map[string]any{"judgements": []any{j("p1:0:0", "agree"), j("p2:0:0", "agree")}}),
			"final_vote": out("p3", map[string]any{"judgements": []any{j("p1:0:0", "agree"), j("p2:0:0", "agree")},
				"claimVotes": []any{v("p1:0:0", "accept"), v("p2:0:0", "accept")}}),
		},
	}}
}

const workedRequest = `{"requestId":"req-21","task":"Should we adopt the proposal?",
 "participants":[{"id":"p1"},{"id":"p2"},{"id":"p3"}],
 "roundPolicy":{"minRounds":1,"maxRounds":3},"consensusPolicy":{"threshold":%v}}`
