package consensus

// The reference decoder for round outputs: the encoding/json implementation
// that decodeRoundOutput replaced, kept verbatim (renamed) so the
// differential fuzz test can check that the hand-written decoder accepts,
// rejects and decodes exactly as it did.

import (
	"encoding/json"
	"fmt"
	"math"
)

// refDecodeRoundOutput parses and validates an untrusted round result for the
// task (participant, phase, round). The output is bound to the dispatched
// task: a participantId, phase or round that disagrees is an error (§22.1).
// It never panics; every problem is returned as an error message.
func refDecodeRoundOutput(raw []byte, pid string, phase Phase, round int) (*Output, error) {
	if err := checkRaw(raw); err != nil {
		return nil, err
	}
	var env roundEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s: %s", invalidResult, err.Error())
	}
	if env.Kind == nil || *env.Kind != "round" {
		return nil, fmt.Errorf("%s: kind must be \"round\"", invalidResult)
	}
	if env.Output == nil {
		return nil, fmt.Errorf("%s: output is required", invalidResult)
	}
	out, msg := refConvertOutput(env.Output, pid, phase, round)
	if msg != "" {
		return nil, fmt.Errorf("%s: %s", invalidResult, msg)
	}
	return out, nil
}

// required validates a required non-empty string decoded as a plain string.
func refRequired(s string, max int) string {
	if s == "" {
		return " is required and must not be empty"
	}
	if len(s) > max {
		return fmt.Sprintf(" exceeds %d bytes", max)
	}
	return ""
}

// item names list element i of field list, e.g. output.judgements[3].
func refItem(list string, i int, field string) string {
	return fmt.Sprintf("output.%s[%d].%s", list, i, field)
}

func refConvertOutput(r *rawOutput, pid string, phase Phase, round int) (*Output, string) {
	if r.ParticipantID != nil && *r.ParticipantID != pid {
		return nil, fmt.Sprintf("output.participantId %q does not match the task's participant %q", *r.ParticipantID, pid)
	}
	if r.Phase != nil && Phase(*r.Phase) != phase {
		return nil, fmt.Sprintf("output.phase %q does not match the task's phase %q", *r.Phase, phase)
	}
	if r.Round != nil && *r.Round != float64(round) {
		return nil, fmt.Sprintf("output.round %v does not match the task's round %d", *r.Round, round)
	}
	if m := text(r.FullResponse, true, true, MaxTextBytes); m != "" {
		return nil, "output.fullResponse" + m
	}
	if m := text(r.Summary, true, true, MaxTextBytes); m != "" {
		return nil, "output.summary" + m
	}
	if m := text(r.RespondedAt, false, true, MaxIDBytes); m != "" {
		return nil, "output.respondedAt" + m
	}
	if r.SelfScore != nil && !(*r.SelfScore >= 0 && *r.SelfScore <= 100) {
		return nil, "output.selfScore must be between 0 and 100"
	}
	out := &Output{ParticipantID: pid, Phase: phase, Round: round,
		FullResponse: *r.FullResponse, Summary: *r.Summary, SelfScore: r.SelfScore}
	if m := refConvertPhaseFields(r, phase, out); m != "" {
		return nil, m
	}
	if m := refConvertClaims(r.ExtractedClaims, out); m != "" {
		return nil, m
	}
	if m := refConvertJudgements(r.Judgements, out); m != "" {
		return nil, m
	}
	return out, ""
}

func refConvertPhaseFields(r *rawOutput, phase Phase, out *Output) string {
	switch phase {
	case PhaseInitial:
		if m := text(r.TaskTitle, true, true, MaxTextBytes); m != "" {
			return "output.taskTitle" + m
		}
		if utf16Len(*r.TaskTitle) > MaxTaskTitle {
			return fmt.Sprintf("output.taskTitle exceeds %d characters", MaxTaskTitle)
		}
		out.TaskTitle = *r.TaskTitle
		fallthrough
	case PhaseDebate:
		if r.ClaimVotes != nil {
			return fmt.Sprintf("output.claimVotes must be absent in the %s phase", phase)
		}
		return ""
	}
	if r.ClaimVotes == nil || len(*r.ClaimVotes) == 0 {
		return "output.claimVotes must have at least 1 entry"
	}
	if len(*r.ClaimVotes) > MaxListLen {
		return fmt.Sprintf("output.claimVotes exceeds %d entries", MaxListLen)
	}
	out.ClaimVotes = make([]VoteInput, len(*r.ClaimVotes))
	for i, v := range *r.ClaimVotes {
		if m := refRequired(v.ClaimID, MaxIDBytes); m != "" {
			return refItem("claimVotes", i, "claimId") + m
		}
		if v.Vote != VoteAccept && v.Vote != VoteReject {
			return refItem("claimVotes", i, "vote") + " must be \"accept\" or \"reject\""
		}
		if m := text(v.Reason, false, false, MaxTextBytes); m != "" {
			return refItem("claimVotes", i, "reason") + m
		}
		out.ClaimVotes[i] = VoteInput{ClaimID: v.ClaimID, Vote: v.Vote, Reason: v.Reason}
	}
	return ""
}

func refValidCategory(c string) bool {
	switch c {
	case "pro", "con", "risk", "tradeoff", "todo":
		return true
	}
	return false
}

func refConvertClaims(list *[]rawClaim, out *Output) string {
	if list == nil {
		return ""
	}
	if len(*list) > MaxListLen {
		return fmt.Sprintf("output.extractedClaims exceeds %d entries", MaxListLen)
	}
	out.hasClaims = true
	out.ExtractedClaims = make([]ExtractedClaim, len(*list))
	for i, c := range *list {
		if m := refRequired(c.Title, MaxTextBytes); m != "" {
			return refItem("extractedClaims", i, "title") + m
		}
		if m := refRequired(c.Statement, MaxTextBytes); m != "" {
			return refItem("extractedClaims", i, "statement") + m
		}
		if m := text(c.ClaimID, false, true, MaxIDBytes); m != "" {
			return refItem("extractedClaims", i, "claimId") + m
		}
		ec := ExtractedClaim{Title: c.Title, Statement: c.Statement}
		if c.Category != nil {
			if !refValidCategory(*c.Category) {
				return refItem("extractedClaims", i, "category") + " must be one of pro, con, risk, tradeoff, todo"
			}
			ec.Category = *c.Category
		}
		out.ExtractedClaims[i] = ec
	}
	return ""
}

func refConvertJudgements(list *[]rawJudgement, out *Output) string {
	if list == nil {
		return "output.judgements is required"
	}
	if len(*list) > MaxListLen {
		return fmt.Sprintf("output.judgements exceeds %d entries", MaxListLen)
	}
	out.Judgements = make([]Judgement, len(*list))
	for i, j := range *list {
		for _, f := range [...]struct {
			p             *string
			name          string
			required, one bool
			max           int
		}{
			{j.RevisedStatement, "revisedStatement", false, true, MaxTextBytes},
			{j.MergesWith, "mergesWith", false, true, MaxIDBytes},
		} {
			if m := text(f.p, f.required, f.one, f.max); m != "" {
				return refItem("judgements", i, f.name) + m
			}
		}
		if m := refRequired(j.ClaimID, MaxIDBytes); m != "" {
			return refItem("judgements", i, "claimId") + m
		}
		if m := refRequired(j.Rationale, MaxTextBytes); m != "" {
			return refItem("judgements", i, "rationale") + m
		}
		if !isStance(j.Stance) {
			return refItem("judgements", i, "stance") + " must be agree, disagree or revise"
		}
		if j.Confidence == nil || !(*j.Confidence >= 0 && *j.Confidence <= 1) || math.IsNaN(*j.Confidence) {
			return refItem("judgements", i, "confidence") + " must be a number between 0 and 1"
		}
		out.Judgements[i] = Judgement{ClaimID: j.ClaimID, Stance: j.Stance, Confidence: *j.Confidence,
			Rationale: j.Rationale, RevisedStatement: j.RevisedStatement, MergesWith: j.MergesWith}
	}
	return ""
}
