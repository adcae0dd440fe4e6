package consensus

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// refRoundPrompt is roundPrompt as it was before it wrote into one buffer
// (lines joined with strings.Join), kept to pin the bytes.
func refRoundPrompt(req *Request, phase Phase, round int) string {
	if phase == PhaseDebate && req.PromptPolicy != nil && req.PromptPolicy.DebateTemplate != "" {
		return req.PromptPolicy.DebateTemplate
	}
	lines := []string{
		"You take part in a structured multi-agent debate run by a consensus engine.",
		`Answer with exactly one JSON object: {"kind":"round","output":{...}} where output follows metadata.outputSchema. No markdown fences.`,
		"phase=" + string(phase), "round=" + strconv.Itoa(round), "task=" + req.Task,
	}
	if c := req.Constraints; c != nil {
		if c.Language != "" {
			lines = append(lines, "language="+c.Language)
		}
		if c.TokenBudgetHint != nil {
			lines = append(lines, "token_budget_hint="+strconv.FormatInt(*c.TokenBudgetHint, 10))
		}
	}
	lines = append(lines, "")
	switch phase {
	case PhaseInitial:
		lines = append(lines, "Goal: give your own analysis, a short taskTitle (at most 60 characters) and the concrete claims you want debated.",
			"Required: fullResponse, summary, taskTitle, judgements (may be empty). Optional: extractedClaims [{title, statement, category?}].",
			"Do not assign claim ids and do not send claimVotes.")
	case PhaseDebate:
		lines = append(lines, "Goal: judge the claims in claimCatalog in the light of peerRoundInputs; revise, object, or merge duplicates (the older claim survives).",
			"Required: fullResponse, summary, judgements [{claimId, stance: agree|disagree|revise, confidence 0..1, rationale, revisedStatement?, mergesWith?}].",
			"Optional: extractedClaims for genuinely new points. Do not send claimVotes.")
	default:
		lines = append(lines, "Goal: vote on every claim in claimCatalog, once each.",
			"Required: fullResponse, summary, judgements (may be empty), claimVotes [{claimId, vote: accept|reject, reason?}] with at least one vote.")
	}
	return strings.Join(lines, "\n")
}

func TestRoundPrompt_MatchesReference(t *testing.T) {
	extras := []string{
		``,
		`,"constraints":{"language":"fr"}`,
		`,"constraints":{"tokenBudgetHint":1200}`,
		`,"constraints":{"language":"日本語","tokenBudgetHint":9007199254740991}`,
		`,"constraints":{}`,
		`,"promptPolicy":{"debateTemplate":"DEBATE!"}`,
	}
	for i, extra := range extras {
		req := mustRequest(t, `{"requestId":"r","task":"Decide. \n Über 🎉","participants":[{"id":"a"},{"id":"b"}]`+extra+`}`)
		s := &State{req: req}
		for _, phase := range []Phase{PhaseInitial, PhaseDebate, PhaseFinalVote} {
			for _, round := range []int{0, 1, 12, 123456} {
				t.Run(fmt.Sprintf("%d/%s/%d", i, phase, round), func(t *testing.T) {
					if got, want := s.roundPrompt(phase, round), refRoundPrompt(req, phase, round); got != want {
						t.Fatalf("roundPrompt:\n%q\nwant\n%q", got, want)
					}
				})
			}
		}
	}
}
