package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
)

// Persona makes up plausible, deterministic answers for any task, so a demo
// runs without an LLM. Its answers depend only on the task: the same task
// always gets the same bytes. Each participant proposes a benefit and a
// risk, mostly agrees with peers (revising a few claims in round 1), agrees
// fully from round 2 so early stop can trigger, and rejects a few peer
// claims in the final vote.
type Persona struct{}

// Agent returns the persona as an Agent.
func (p Persona) Agent() Agent {
	return AgentFunc(func(_ context.Context, t *Task) (json.RawMessage, error) { return p.Answer(t) })
}

func pick(parts ...string) uint32 {
	h := fnv.New32a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum32()
}

func shortTask(task string) string {
	t := collapseSpace(task)
	if utf16Len(t) > 48 {
		t = utf16Prefix(t, 47) + "…"
	}
	return t
}

// Answer returns the persona's raw result for t.
func (p Persona) Answer(t *Task) (json.RawMessage, error) {
	var content any
	switch t.Kind {
	case TaskReport:
		content = p.report(t)
	case TaskAction:
		content = map[string]string{
			"fullResponse": fmt.Sprintf("%s carried out the requested action based on the debate outcome (%s). Steps: review the accepted claims, apply them in order, and record what changed for follow-up.", t.ParticipantID, t.ArgueResult.Status),
			"summary":      fmt.Sprintf("%s applied the accepted claims and recorded the changes.", t.ParticipantID),
		}
	default:
		content = p.round(t)
	}
	return wrapOutput(t, mustJSON(content))
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("consensus: persona content does not encode: " + err.Error())
	}
	return b
}

func (p Persona) round(t *Task) map[string]any {
	topic := shortTask(t.Prompt)
	if i := strings.Index(t.Prompt, "\ntask="); i >= 0 {
		rest := t.Prompt[i+len("\ntask="):]
		if j := strings.IndexByte(rest, '\n'); j >= 0 {
			rest = rest[:j]
		}
		topic = shortTask(rest)
	}
	who := t.ParticipantID
	out := map[string]any{
		"fullResponse": fmt.Sprintf("%s, round %d (%s): having weighed the question \"%s\" against the points raised so far, I keep the parts that hold up, flag the risks that remain, and explain which claims I support and why, so the group can converge on a decision.", who, t.Round, t.Phase, topic),
		"summary":      fmt.Sprintf("%s supports the well-founded claims on \"%s\" and flags the remaining risks for the final vote.", who, topic),
	}
	judgements := []map[string]any{}
	votes := []map[string]any{}
	for _, c := range t.ClaimCatalog {
		own := len(c.ProposedBy) > 0 && c.ProposedBy[0] == who
		h := pick(who, c.ClaimID, fmt.Sprint(t.Round))
		j := map[string]any{"claimId": c.ClaimID, "stance": StanceAgree, "confidence": 0.8,
			"rationale": fmt.Sprintf("%s finds \"%s\" consistent with the evidence.", who, c.Title)}
		if t.Phase == PhaseDebate && t.Round == 1 && !own && h%4 == 0 {
			j["stance"] = StanceRevise
			j["rationale"] = fmt.Sprintf("%s thinks \"%s\" needs a narrower scope.", who, c.Title)
			j["revisedStatement"] = c.Statement + " (in the common case)"
		}
		judgements = append(judgements, j)
		if t.Phase == PhaseFinalVote {
			vote := VoteAccept
			if !own && h%5 == 0 {
				vote = VoteReject
			}
			votes = append(votes, map[string]any{"claimId": c.ClaimID, "vote": vote,
				"reason": fmt.Sprintf("%s votes %s on \"%s\".", who, vote, c.Title)})
		}
	}
	out["judgements"] = judgements
	switch t.Phase {
	case PhaseInitial:
		out["taskTitle"] = utf16Prefix(collapseSpace(topic), MaxTaskTitle)
		out["extractedClaims"] = []map[string]any{
			{"title": fmt.Sprintf("Benefit noted by %s", who), "statement": fmt.Sprintf("Addressing \"%s\" brings a clear, measurable benefit.", topic), "category": "pro"},
			{"title": fmt.Sprintf("Risk noted by %s", who), "statement": fmt.Sprintf("Addressing \"%s\" carries a risk that needs a mitigation plan.", topic), "category": "risk"},
		}
	case PhaseFinalVote:
		if len(votes) == 0 {
			votes = append(votes, map[string]any{"claimId": "none", "vote": VoteReject})
		}
		out["claimVotes"] = votes
	}
	return out
}

func (p Persona) report(t *Task) map[string]any {
	in := t.ReportInput
	resolved := 0
	for _, r := range in.ClaimResolutions {
		if r.Status == "resolved" {
			resolved++
		}
	}
	return map[string]any{
		"mode": ComposerRepresentative, "traceIncluded": false, "traceLevel": TraceCompact,
		"finalSummary": fmt.Sprintf("Outcome: %s. %d of %d claims were resolved.", in.Status, resolved,
			len(in.ClaimResolutions)),
		"representativeSpeech": fmt.Sprintf("Speaking for the group, %s: %s", t.ParticipantID, in.Representative.Speech),
	}
}
