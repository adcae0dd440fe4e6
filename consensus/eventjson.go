package consensus

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// A hand-written JSON encoder for the one large event payload,
// ParticipantResponded (it repeats the whole output: a 500-vote final vote
// is ~20 KB). The bytes equal encoding/json's for the same value
// (TestAppendJSON_MatchesEncodingJSON, FuzzAppendJSONString); a replicated
// caller encodes every event on every replica, so reflection there costs
// real throughput.

// AppendJSON appends p as encoding/json would encode it.
func (p *ParticipantRespondedPayload) AppendJSON(b []byte) []byte {
	b = append(b, `{"phase":`...)
	b = appendJSONString(b, string(p.Phase))
	b = append(b, `,"round":`...)
	b = strconv.AppendInt(b, int64(p.Round), 10)
	b = append(b, `,"participantId":`...)
	b = appendJSONString(b, p.ParticipantID)
	b = append(b, `,"summary":`...)
	b = appendJSONString(b, p.Summary)
	for _, f := range [...]struct {
		key string
		n   int
	}{{`,"extractedClaims":`, p.ExtractedClaims}, {`,"judgements":`, p.Judgements},
		{`,"stanceAgree":`, p.StanceAgree}, {`,"stanceDisagree":`, p.StanceDisagree},
		{`,"stanceRevise":`, p.StanceRevise}, {`,"claimVotes":`, p.ClaimVotes}} {
		b = append(b, f.key...)
		b = strconv.AppendInt(b, int64(f.n), 10)
	}
	b = append(b, `,"fullResponse":`...)
	b = appendJSONString(b, p.FullResponse)
	if len(p.ExtractedClaimsDetail) > 0 {
		b = append(b, `,"extractedClaimsDetail":[`...)
		for i := range p.ExtractedClaimsDetail {
			c := &p.ExtractedClaimsDetail[i]
			b = appendComma(b, i)
			b = append(b, `{"title":`...)
			b = appendJSONString(b, c.Title)
			b = append(b, `,"statement":`...)
			b = appendJSONString(b, c.Statement)
			if c.Category != "" {
				b = append(b, `,"category":`...)
				b = appendJSONString(b, c.Category)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"judgementsDetail":`...)
	b = appendJudgements(b, p.JudgementsDetail)
	if len(p.ClaimVotesDetail) > 0 {
		b = append(b, `,"claimVotesDetail":[`...)
		for i := range p.ClaimVotesDetail {
			v := &p.ClaimVotesDetail[i]
			b = appendComma(b, i)
			b = append(b, `{"claimId":`...)
			b = appendJSONString(b, v.ClaimID)
			b = append(b, `,"vote":`...)
			b = appendJSONString(b, v.Vote)
			b = appendOptString(b, `,"reason":`, v.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendJudgements(b []byte, js []Judgement) []byte {
	if js == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range js {
		j := &js[i]
		b = appendComma(b, i)
		b = append(b, `{"claimId":`...)
		b = appendJSONString(b, j.ClaimID)
		b = append(b, `,"stance":`...)
		b = appendJSONString(b, j.Stance)
		b = append(b, `,"confidence":`...)
		b = appendJSONFloat(b, j.Confidence)
		b = append(b, `,"rationale":`...)
		b = appendJSONString(b, j.Rationale)
		b = appendOptString(b, `,"revisedStatement":`, j.RevisedStatement)
		b = appendOptString(b, `,"mergesWith":`, j.MergesWith)
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendComma(b []byte, i int) []byte {
	if i > 0 {
		return append(b, ',')
	}
	return b
}

func appendOptString(b []byte, key string, p *string) []byte {
	if p == nil {
		return b
	}
	b = append(b, key...)
	return appendJSONString(b, *p)
}

// appendJSONString appends s quoted. Plain printable ASCII without HTML
// characters is copied; anything else goes through encoding/json so that
// escaping and invalid UTF-8 handling stay identical.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat formats f as encoding/json does (ES6 number formatting).
// Engine floats are finite (validated confidences and scores).
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...) // unreachable for engine values
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// AppendClaimsJSON appends claims as encoding/json encodes a []Claim. The
// leader encodes a round's catalog (hundreds of claims) for its task
// messages on the path between two rounds.
func AppendClaimsJSON(b []byte, claims []Claim) []byte {
	if claims == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range claims {
		c := &claims[i]
		b = appendComma(b, i)
		b = append(b, `{"claimId":`...)
		b = appendJSONString(b, c.ClaimID)
		b = append(b, `,"title":`...)
		b = appendJSONString(b, c.Title)
		b = append(b, `,"statement":`...)
		b = appendJSONString(b, c.Statement)
		if c.Category != "" {
			b = append(b, `,"category":`...)
			b = appendJSONString(b, c.Category)
		}
		b = append(b, `,"proposedBy":`...)
		if c.ProposedBy == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for k, p := range c.ProposedBy {
				b = appendComma(b, k)
				b = appendJSONString(b, p)
			}
			b = append(b, ']')
		}
		b = append(b, `,"status":`...)
		b = appendJSONString(b, c.Status)
		if c.MergedInto != "" {
			b = append(b, `,"mergedInto":`...)
			b = appendJSONString(b, c.MergedInto)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
