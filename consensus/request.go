package consensus

import "encoding/json"

// Request is a validated, normalised start request (spec §2): every policy
// block holds its defaults where the caller left keys out. Obtain one from
// ParseRequest; Apply re-checks it with Validate. A Request is immutable once
// a run holds it.
type Request struct {
	RequestID          string             `json:"requestId"`
	Task               string             `json:"task"`
	Participants       []Participant      `json:"participants"`
	ParticipantsPolicy ParticipantsPolicy `json:"participantsPolicy"`
	RoundPolicy        RoundPolicy        `json:"roundPolicy"`
	SessionPolicy      SessionPolicy      `json:"sessionPolicy"`
	PeerContextPolicy  PeerContextPolicy  `json:"peerContextPolicy"`
	ScoringPolicy      ScoringPolicy      `json:"scoringPolicy"`
	ConsensusPolicy    ConsensusPolicy    `json:"consensusPolicy"`
	ReportPolicy       ReportPolicy       `json:"reportPolicy"`
	ActionPolicy       *ActionPolicy      `json:"actionPolicy,omitempty"`
	PromptPolicy       *PromptPolicy      `json:"promptPolicy,omitempty"`
	WaitingPolicy      WaitingPolicy      `json:"waitingPolicy"`
	Constraints        *Constraints       `json:"constraints,omitempty"`
	// Context is passed to agents untouched (a JSON object), absent when nil.
	Context json.RawMessage `json:"context,omitempty"`
}

// Participant is one debater, in request order.
type Participant struct {
	ID   string  `json:"id"`
	Role *string `json:"role,omitempty"`
}

// ParticipantsPolicy says how many active participants a run needs.
type ParticipantsPolicy struct {
	MinParticipants int64 `json:"minParticipants"`
	// OnInsufficientParticipants is "interrupt" (finish early) or "fail".
	OnInsufficientParticipants string `json:"onInsufficientParticipants"`
}

// RoundPolicy bounds the debate rounds.
type RoundPolicy struct {
	MinRounds int64 `json:"minRounds"`
	MaxRounds int64 `json:"maxRounds"`
}

// SessionPolicy controls sticky session keys.
type SessionPolicy struct {
	Mode             string `json:"mode"`
	SessionKeyPrefix string `json:"sessionKeyPrefix,omitempty"`
}

// PeerContextPolicy controls the peer responses sent with each round task.
type PeerContextPolicy struct {
	PassMode                string `json:"passMode"`
	MaxCharsPerPeerResponse int64  `json:"maxCharsPerPeerResponse"`
	MaxPeersPerRound        int64  `json:"maxPeersPerRound"`
	OverflowStrategy        string `json:"overflowStrategy"`
}

// ScoringPolicy controls scoring and representative selection.
type ScoringPolicy struct {
	Enabled                 bool   `json:"enabled"`
	RepresentativeSelection string `json:"representativeSelection"`
	TieBreaker              string `json:"tieBreaker"`
	Rubric                  Rubric `json:"rubric"`
}

// Rubric holds the scoring weights, each in [0,1].
type Rubric struct {
	Correctness   float64 `json:"correctness"`
	Completeness  float64 `json:"completeness"`
	Actionability float64 `json:"actionability"`
	Consistency   float64 `json:"consistency"`
}

// ConsensusPolicy holds the claim acceptance threshold in [0,1].
type ConsensusPolicy struct {
	Threshold float64 `json:"threshold"`
}

// ReportPolicy controls the final report.
type ReportPolicy struct {
	IncludeDeliberationTrace bool   `json:"includeDeliberationTrace"`
	TraceLevel               string `json:"traceLevel"`
	Composer                 string `json:"composer"`
	RepresentativeID         string `json:"representativeId,omitempty"`
}

// ActionPolicy requests the optional action step.
type ActionPolicy struct {
	Prompt            string `json:"prompt"`
	ActorID           string `json:"actorId,omitempty"`
	IncludeFullResult bool   `json:"includeFullResult"`
}

// PromptPolicy replaces built-in prompt texts.
type PromptPolicy struct {
	DebateTemplate string `json:"debateTemplate,omitempty"`
	ReportTemplate string `json:"reportTemplate,omitempty"`
}

// WaitingPolicy bounds waiting, in milliseconds.
type WaitingPolicy struct {
	PerTaskTimeoutMs  int64  `json:"perTaskTimeoutMs"`
	PerRoundTimeoutMs int64  `json:"perRoundTimeoutMs"`
	GlobalDeadlineMs  *int64 `json:"globalDeadlineMs,omitempty"`
}

// Constraints are hints passed to agents.
type Constraints struct {
	Language        string `json:"language,omitempty"`
	TokenBudgetHint *int64 `json:"tokenBudgetHint,omitempty"`
}

// Policy values and defaults (spec §2.1).
const (
	OnInsufficientInterrupt = "interrupt"
	OnInsufficientFail      = "fail"
	SessionModeSticky       = "sticky-per-participant"
	PassModeFullPreferred   = "full-response-preferred"
	OverflowTruncateTail    = "truncate-tail"
	OverflowTruncateMiddle  = "truncate-middle"
	SelectionTopScore       = "top-score"
	TieBreakLatestRound     = "latest-round-score"
	TieBreakLeastObjection  = "least-objection"
	TraceCompact            = "compact"
	TraceFull               = "full"
	ComposerBuiltin         = "builtin"
	ComposerRepresentative  = "representative"

	defaultSessionKeyPrefix = "argue"
	defaultTimeoutMs        = 1_200_000
	maxSafeInteger          = 1<<53 - 1

	// MaxRequestBytes bounds the encoded start request.
	MaxRequestBytes = 4 << 20
	// MaxParticipants bounds the participant list (not in argue; a guard
	// against absurd requests reaching a replicated state machine).
	MaxParticipants = 256
)

// DefaultRubric returns the default scoring weights.
func DefaultRubric() Rubric {
	return Rubric{Correctness: 0.35, Completeness: 0.25, Actionability: 0.25, Consistency: 0.15}
}

// sessionKeyPrefix returns the configured prefix or "argue".
func (r *Request) sessionKeyPrefix() string {
	if r.SessionPolicy.SessionKeyPrefix != "" {
		return r.SessionPolicy.SessionKeyPrefix
	}
	return defaultSessionKeyPrefix
}

// participantIndex returns the position of id in the request, or -1.
func (r *Request) participantIndex(id string) int {
	for i := range r.Participants {
		if r.Participants[i].ID == id {
			return i
		}
	}
	return -1
}
