package consensus

import (
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// Limits applied to untrusted agent output. argue has none; a replicated
// state machine needs them so one agent cannot bloat every replica.
const (
	// MaxOutputBytes bounds the raw JSON of one task result.
	MaxOutputBytes = 1 << 20
	// MaxTextBytes bounds any single string in an output.
	MaxTextBytes = 256 << 10
	// MaxIDBytes bounds claim ids named in judgements and votes.
	MaxIDBytes = 512
	// MaxListLen bounds extractedClaims, judgements and claimVotes.
	MaxListLen = 10000
	// MaxTaskTitle is argue's limit on taskTitle, in UTF-16 units.
	MaxTaskTitle = 60
)

// invalidResult is the error code argue gives a round result that does not
// match its schema.
const invalidResult = "invalid_round_result"

// Required non-empty strings decode into plain strings (absent and "" fail
// alike); pointers remain where absence and emptiness differ. Fewer pointers
// mean fewer allocations on large outputs.
type rawClaim struct {
	Title     string  `json:"title"`
	Statement string  `json:"statement"`
	Category  *string `json:"category"`
	ClaimID   *string `json:"claimId"`
}

type rawJudgement struct {
	ClaimID          string   `json:"claimId"`
	Stance           string   `json:"stance"`
	Confidence       *float64 `json:"confidence"`
	Rationale        string   `json:"rationale"`
	RevisedStatement *string  `json:"revisedStatement"`
	MergesWith       *string  `json:"mergesWith"`
}

type rawVote struct {
	ClaimID string  `json:"claimId"`
	Vote    string  `json:"vote"`
	Reason  *string `json:"reason"`
}

type rawOutput struct {
	ParticipantID   *string         `json:"participantId"`
	Phase           *string         `json:"phase"`
	Round           *float64        `json:"round"`
	FullResponse    *string         `json:"fullResponse"`
	Summary         *string         `json:"summary"`
	TaskTitle       *string         `json:"taskTitle"`
	ExtractedClaims *[]rawClaim     `json:"extractedClaims"`
	Judgements      *[]rawJudgement `json:"judgements"`
	ClaimVotes      *[]rawVote      `json:"claimVotes"`
	SelfScore       *float64        `json:"selfScore"`
	RespondedAt     *string         `json:"respondedAt"`
}

type roundEnvelope struct {
	Kind   *string    `json:"kind"`
	Output *rawOutput `json:"output"`
}

// decodeRoundOutput parses and validates an untrusted round result for the
// task (participant, phase, round). The output is bound to the dispatched
// task: a participantId, phase or round that disagrees is an error (§22.1).
// It never panics; every problem is returned as an error message.
func decodeRoundOutput(raw []byte, pid string, phase Phase, round int) (*Output, error) {
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
	out, msg := convertOutput(env.Output, pid, phase, round)
	if msg != "" {
		return nil, fmt.Errorf("%s: %s", invalidResult, msg)
	}
	return out, nil
}

func checkRaw(raw []byte) error {
	if len(raw) > MaxOutputBytes {
		return fmt.Errorf("%s: result exceeds %d bytes", invalidResult, MaxOutputBytes)
	}
	if !utf8.Valid(raw) {
		return fmt.Errorf("%s: result is not valid UTF-8", invalidResult)
	}
	return nil
}

// text validates a string field: present when required, non-empty when
// minOne, and within size limits. It returns "" or a problem that the
// caller prefixes with the field name (built only on failure: outputs can
// hold thousands of fields).
func text(p *string, required, minOne bool, max int) string {
	if p == nil {
		if required {
			return " is required"
		}
		return ""
	}
	if minOne && *p == "" {
		return " must not be empty"
	}
	if len(*p) > max {
		return fmt.Sprintf(" exceeds %d bytes", max)
	}
	return ""
}

// required validates a required non-empty string decoded as a plain string.
func required(s string, max int) string {
	if s == "" {
		return " is required and must not be empty"
	}
	if len(s) > max {
		return fmt.Sprintf(" exceeds %d bytes", max)
	}
	return ""
}

// item names list element i of field list, e.g. output.judgements[3].
func item(list string, i int, field string) string {
	return fmt.Sprintf("output.%s[%d].%s", list, i, field)
}

func convertOutput(r *rawOutput, pid string, phase Phase, round int) (*Output, string) {
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
	if m := convertPhaseFields(r, phase, out); m != "" {
		return nil, m
	}
	if m := convertClaims(r.ExtractedClaims, out); m != "" {
		return nil, m
	}
	if m := convertJudgements(r.Judgements, out); m != "" {
		return nil, m
	}
	return out, ""
}

func convertPhaseFields(r *rawOutput, phase Phase, out *Output) string {
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
		if m := required(v.ClaimID, MaxIDBytes); m != "" {
			return item("claimVotes", i, "claimId") + m
		}
		if v.Vote != VoteAccept && v.Vote != VoteReject {
			return item("claimVotes", i, "vote") + " must be \"accept\" or \"reject\""
		}
		if m := text(v.Reason, false, false, MaxTextBytes); m != "" {
			return item("claimVotes", i, "reason") + m
		}
		out.ClaimVotes[i] = VoteInput{ClaimID: v.ClaimID, Vote: v.Vote, Reason: v.Reason}
	}
	return ""
}

func validCategory(c string) bool {
	switch c {
	case "pro", "con", "risk", "tradeoff", "todo":
		return true
	}
	return false
}

func convertClaims(list *[]rawClaim, out *Output) string {
	if list == nil {
		return ""
	}
	if len(*list) > MaxListLen {
		return fmt.Sprintf("output.extractedClaims exceeds %d entries", MaxListLen)
	}
	out.hasClaims = true
	out.ExtractedClaims = make([]ExtractedClaim, len(*list))
	for i, c := range *list {
		if m := required(c.Title, MaxTextBytes); m != "" {
			return item("extractedClaims", i, "title") + m
		}
		if m := required(c.Statement, MaxTextBytes); m != "" {
			return item("extractedClaims", i, "statement") + m
		}
		if m := text(c.ClaimID, false, true, MaxIDBytes); m != "" {
			return item("extractedClaims", i, "claimId") + m
		}
		ec := ExtractedClaim{Title: c.Title, Statement: c.Statement}
		if c.Category != nil {
			if !validCategory(*c.Category) {
				return item("extractedClaims", i, "category") + " must be one of pro, con, risk, tradeoff, todo"
			}
			ec.Category = *c.Category
		}
		out.ExtractedClaims[i] = ec
	}
	return ""
}

func convertJudgements(list *[]rawJudgement, out *Output) string {
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
				return item("judgements", i, f.name) + m
			}
		}
		if m := required(j.ClaimID, MaxIDBytes); m != "" {
			return item("judgements", i, "claimId") + m
		}
		if m := required(j.Rationale, MaxTextBytes); m != "" {
			return item("judgements", i, "rationale") + m
		}
		if !isStance(j.Stance) {
			return item("judgements", i, "stance") + " must be agree, disagree or revise"
		}
		if j.Confidence == nil || !(*j.Confidence >= 0 && *j.Confidence <= 1) || math.IsNaN(*j.Confidence) {
			return item("judgements", i, "confidence") + " must be a number between 0 and 1"
		}
		out.Judgements[i] = Judgement{ClaimID: j.ClaimID, Stance: j.Stance, Confidence: *j.Confidence,
			Rationale: j.Rationale, RevisedStatement: j.RevisedStatement, MergesWith: j.MergesWith}
	}
	return ""
}
