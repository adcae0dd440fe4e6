package consensus

import (
	"encoding/json"
	"fmt"
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

// The types below are the shape encoding/json decoded round results into
// before the hand-written decoder (outscan.go, outparse.go, outcheck.go)
// replaced it. They define the acceptance rules the new decoder keeps
// (required strings are plain strings: absent and "" fail alike; optional
// fields are pointers), and they still word the error of a result that is
// not well-formed JSON of this shape: see jsonError. The old decoder itself
// lives on in output_ref_test.go for the differential fuzz test.
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

// jsonError words the rejection of a result that is not well-formed JSON
// of the envelope's shape exactly as before: by asking encoding/json. The
// text reaches ParticipantEliminated events, which must not change with the
// decoder. Only rejected results pay for this, at most MaxOutputBytes each.
func jsonError(raw []byte) error {
	var env roundEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: %s", invalidResult, err.Error())
	}
	// Unreachable while the decoders agree (FuzzDecodeRoundOutput_Differential).
	return fmt.Errorf("%s: malformed result", invalidResult)
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
		return optText(false, 0, required, minOne, max)
	}
	return optText(true, len(*p), required, minOne, max)
}
