package consensus

import (
	"encoding/json"

	"math"
)

// JSON Schemas (draft 2020-12) of the output contents, sent to agents in
// task metadata. They describe what decodeRoundOutput and decodeReport accept.
const (
	schemaClaim     = `{"type":"object","required":["title","statement"],"properties":{"title":{"type":"string","minLength":1},"statement":{"type":"string","minLength":1},"category":{"enum":["pro","con","risk","tradeoff","todo"]}}}`
	schemaJudgement = `{"type":"object","required":["claimId","stance","confidence","rationale"],"properties":{"claimId":{"type":"string","minLength":1},"stance":{"enum":["agree","disagree","revise"]},"confidence":{"type":"number","minimum":0,"maximum":1},"rationale":{"type":"string","minLength":1},"revisedStatement":{"type":"string","minLength":1},"mergesWith":{"type":"string","minLength":1}}}`
	schemaVote      = `{"type":"object","required":["claimId","vote"],"properties":{"claimId":{"type":"string","minLength":1},"vote":{"enum":["accept","reject"]},"reason":{"type":"string"}}}`
	schemaText      = `{"type":"string","minLength":1}`
)

var roundSchemas = map[Phase]json.RawMessage{
	PhaseInitial:   json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"InitialRoundOutput","type":"object","required":["fullResponse","summary","taskTitle","judgements"],"properties":{"fullResponse":` + schemaText + `,"summary":` + schemaText + `,"taskTitle":{"type":"string","minLength":1,"maxLength":60},"extractedClaims":{"type":"array","items":` + schemaClaim + `},"judgements":{"type":"array","items":` + schemaJudgement + `}}}`),
	PhaseDebate:    json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"DebateRoundOutput","type":"object","required":["fullResponse","summary","judgements"],"properties":{"fullResponse":` + schemaText + `,"summary":` + schemaText + `,"extractedClaims":{"type":"array","items":` + schemaClaim + `},"judgements":{"type":"array","minItems":1,"items":` + schemaJudgement + `}}}`),
	PhaseFinalVote: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"FinalVoteRoundOutput","type":"object","required":["fullResponse","summary","judgements","claimVotes"],"properties":{"fullResponse":` + schemaText + `,"summary":` + schemaText + `,"judgements":{"type":"array","items":` + schemaJudgement + `},"claimVotes":{"type":"array","minItems":1,"items":` + schemaVote + `}}}`),
}

var reportSchema = json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"ReportOutput","type":"object","required":["mode","traceIncluded","traceLevel","finalSummary","representativeSpeech"],"properties":{"mode":{"enum":["builtin","representative"]},"traceIncluded":{"type":"boolean"},"traceLevel":{"enum":["compact","full"]},"finalSummary":` + schemaText + `,"representativeSpeech":` + schemaText + `,"opinionShiftTimeline":{"type":"array"},"roundHighlights":{"type":"array"}}}`)

type rawShift struct {
	ClaimID       *string  `json:"claimId"`
	ParticipantID *string  `json:"participantId"`
	From          *string  `json:"from"`
	To            *string  `json:"to"`
	Round         *float64 `json:"round"`
	Reason        *string  `json:"reason"`
}

type rawHighlight struct {
	Round         *float64 `json:"round"`
	ParticipantID *string  `json:"participantId"`
	Summary       *string  `json:"summary"`
}

type rawReport struct {
	Mode                 *string         `json:"mode"`
	TraceIncluded        *bool           `json:"traceIncluded"`
	TraceLevel           *string         `json:"traceLevel"`
	FinalSummary         *string         `json:"finalSummary"`
	RepresentativeSpeech *string         `json:"representativeSpeech"`
	OpinionShiftTimeline *[]rawShift     `json:"opinionShiftTimeline"`
	RoundHighlights      *[]rawHighlight `json:"roundHighlights"`
}

func validRound(f *float64) bool {
	return f != nil && *f >= 0 && *f == math.Trunc(*f) && *f <= maxSafeInteger
}

func isStance(s string) bool { return s == StanceAgree || s == StanceDisagree || s == StanceRevise }

// decodeReport parses {kind:"report", output: FinalReport} (spec §15). It
// reports false for anything that is not a complete FinalReport.
func decodeReport(raw []byte) (*FinalReport, bool) {
	if checkRaw(raw) != nil {
		return nil, false
	}
	var env struct {
		Kind   *string    `json:"kind"`
		Output *rawReport `json:"output"`
	}
	if json.Unmarshal(raw, &env) != nil || env.Kind == nil || *env.Kind != "report" || env.Output == nil {
		return nil, false
	}
	r := env.Output
	if r.Mode == nil || (*r.Mode != ComposerBuiltin && *r.Mode != ComposerRepresentative) || r.TraceIncluded == nil ||
		r.TraceLevel == nil || (*r.TraceLevel != TraceCompact && *r.TraceLevel != TraceFull) ||
		text(r.FinalSummary, true, true, MaxTextBytes) != "" ||
		text(r.RepresentativeSpeech, true, true, MaxTextBytes) != "" {
		return nil, false
	}
	out := &FinalReport{Mode: *r.Mode, TraceIncluded: *r.TraceIncluded, TraceLevel: *r.TraceLevel,
		FinalSummary: *r.FinalSummary, RepresentativeSpeech: *r.RepresentativeSpeech}
	if r.OpinionShiftTimeline != nil {
		out.hasTimeline = true
		out.OpinionShiftTimeline = make([]OpinionShift, 0, len(*r.OpinionShiftTimeline))
		for _, x := range *r.OpinionShiftTimeline {
			if text(x.ClaimID, true, true, MaxIDBytes) != "" || text(x.ParticipantID, true, true, MaxIDBytes) != "" ||
				x.From == nil || (!isStance(*x.From) && *x.From != "unknown") || x.To == nil || !isStance(*x.To) ||
				!validRound(x.Round) || text(x.Reason, false, false, MaxTextBytes) != "" {
				return nil, false
			}
			out.OpinionShiftTimeline = append(out.OpinionShiftTimeline, OpinionShift{ClaimID: *x.ClaimID,
				ParticipantID: *x.ParticipantID, From: *x.From, To: *x.To, Round: int(*x.Round), Reason: x.Reason})
		}
	}
	if r.RoundHighlights != nil {
		out.hasHighlights = true
		out.RoundHighlights = make([]RoundHighlight, 0, len(*r.RoundHighlights))
		for _, x := range *r.RoundHighlights {
			if !validRound(x.Round) || text(x.ParticipantID, true, true, MaxIDBytes) != "" ||
				text(x.Summary, true, true, MaxTextBytes) != "" {
				return nil, false
			}
			out.RoundHighlights = append(out.RoundHighlights, RoundHighlight{Round: int(*x.Round),
				ParticipantID: *x.ParticipantID, Summary: *x.Summary})
		}
	}
	return out, true
}

type finalReportJSON struct {
	Mode                 string            `json:"mode"`
	TraceIncluded        bool              `json:"traceIncluded"`
	TraceLevel           string            `json:"traceLevel"`
	FinalSummary         string            `json:"finalSummary"`
	RepresentativeSpeech string            `json:"representativeSpeech"`
	OpinionShiftTimeline *[]OpinionShift   `json:"opinionShiftTimeline,omitempty"`
	RoundHighlights      *[]RoundHighlight `json:"roundHighlights,omitempty"`
}

// MarshalJSON keeps an empty-but-present trace list as [] (argue emits the
// lists whenever the trace is on, even when empty).
func (r FinalReport) MarshalJSON() ([]byte, error) {
	j := finalReportJSON{Mode: r.Mode, TraceIncluded: r.TraceIncluded, TraceLevel: r.TraceLevel,
		FinalSummary: r.FinalSummary, RepresentativeSpeech: r.RepresentativeSpeech}
	if r.OpinionShiftTimeline != nil || r.hasTimeline {
		t := r.OpinionShiftTimeline
		if t == nil {
			t = []OpinionShift{}
		}
		j.OpinionShiftTimeline = &t
	}
	if r.RoundHighlights != nil || r.hasHighlights {
		h := r.RoundHighlights
		if h == nil {
			h = []RoundHighlight{}
		}
		j.RoundHighlights = &h
	}
	return json.Marshal(j)
}

type outputJSON struct {
	ParticipantID   string            `json:"participantId"`
	Phase           Phase             `json:"phase"`
	Round           int               `json:"round"`
	FullResponse    string            `json:"fullResponse"`
	Summary         string            `json:"summary"`
	TaskTitle       string            `json:"taskTitle,omitempty"`
	ExtractedClaims *[]ExtractedClaim `json:"extractedClaims,omitempty"`
	Judgements      []Judgement       `json:"judgements"`
	ClaimVotes      []VoteInput       `json:"claimVotes,omitempty"`
	SelfScore       *float64          `json:"selfScore,omitempty"`
	RespondedAt     string            `json:"respondedAt"`
}

// MarshalJSON keeps extractedClaims when the agent sent it, even empty, and
// always writes judgements as an array.
func (o *Output) MarshalJSON() ([]byte, error) {
	j := outputJSON{ParticipantID: o.ParticipantID, Phase: o.Phase, Round: o.Round, FullResponse: o.FullResponse,
		Summary: o.Summary, TaskTitle: o.TaskTitle, Judgements: o.Judgements, ClaimVotes: o.ClaimVotes,
		SelfScore: o.SelfScore, RespondedAt: o.RespondedAt}
	if o.hasClaims || o.ExtractedClaims != nil {
		c := o.ExtractedClaims
		if c == nil {
			c = []ExtractedClaim{}
		}
		j.ExtractedClaims = &c
	}
	if j.Judgements == nil {
		j.Judgements = []Judgement{}
	}
	return json.Marshal(j)
}
