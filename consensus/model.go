package consensus

// Phase names a round phase (spec §5).
type Phase string

// Phases.
const (
	PhaseInitial   Phase = "initial"
	PhaseDebate    Phase = "debate"
	PhaseFinalVote Phase = "final_vote"
)

// Claim statuses and stances.
const (
	ClaimActive = "active"
	ClaimMerged = "merged"

	StanceAgree    = "agree"
	StanceDisagree = "disagree"
	StanceRevise   = "revise"

	VoteAccept = "accept"
	VoteReject = "reject"
)

// Claim is one catalog entry (spec §10).
type Claim struct {
	ClaimID    string   `json:"claimId"`
	Title      string   `json:"title"`
	Statement  string   `json:"statement"`
	Category   string   `json:"category,omitempty"`
	ProposedBy []string `json:"proposedBy"`
	Status     string   `json:"status"`
	MergedInto string   `json:"mergedInto,omitempty"`
}

// ExtractedClaim is a claim proposed in an output; the engine assigns its id.
type ExtractedClaim struct {
	Title     string `json:"title"`
	Statement string `json:"statement"`
	Category  string `json:"category,omitempty"`
}

// Judgement is a participant's stance on one claim.
type Judgement struct {
	ClaimID          string  `json:"claimId"`
	Stance           string  `json:"stance"`
	Confidence       float64 `json:"confidence"`
	Rationale        string  `json:"rationale"`
	RevisedStatement *string `json:"revisedStatement,omitempty"`
	MergesWith       *string `json:"mergesWith,omitempty"`
}

// VoteInput is a vote as an agent writes it in a final-vote output.
type VoteInput struct {
	ClaimID string  `json:"claimId"`
	Vote    string  `json:"vote"`
	Reason  *string `json:"reason,omitempty"`
}

// Vote is a counted vote in a claim resolution.
type Vote struct {
	ParticipantID string  `json:"participantId"`
	ClaimID       string  `json:"claimId"`
	Vote          string  `json:"vote"`
	Reason        *string `json:"reason,omitempty"`
}

// Output is one participant's accepted answer to a round task. The engine
// binds ParticipantID, Phase and Round to the dispatched task and stamps
// RespondedAt with the settle time. Outputs are immutable once recorded.
type Output struct {
	ParticipantID   string           `json:"participantId"`
	Phase           Phase            `json:"phase"`
	Round           int              `json:"round"`
	FullResponse    string           `json:"fullResponse"`
	Summary         string           `json:"summary"`
	TaskTitle       string           `json:"taskTitle,omitempty"`
	ExtractedClaims []ExtractedClaim `json:"extractedClaims,omitempty"`
	Judgements      []Judgement      `json:"judgements"`
	ClaimVotes      []VoteInput      `json:"claimVotes,omitempty"`
	SelfScore       *float64         `json:"selfScore,omitempty"`
	RespondedAt     string           `json:"respondedAt"`

	respondedAtMs int64
	hasClaims     bool // extractedClaims was present (possibly empty)
}

// AppliedMerge records one loser claim merged during a round (spec §10.2).
type AppliedMerge struct {
	SourceClaimID  string   `json:"sourceClaimId"`
	TargetClaimID  string   `json:"targetClaimId"`
	ParticipantIDs []string `json:"participantIds"`
}

// RoundRecord is one recorded round of a run.
type RoundRecord struct {
	Round         int            `json:"round"`
	Outputs       []*Output      `json:"outputs"`
	AppliedMerges []AppliedMerge `json:"appliedMerges"`

	phase Phase
}

// Elimination records a participant removed for timeout or error (spec §9).
type Elimination struct {
	ParticipantID string `json:"participantId"`
	Round         int    `json:"round"`
	Reason        string `json:"reason"`
	At            string `json:"at"`

	atMs int64
}

// Elimination reasons.
const (
	ReasonTimeout = "timeout"
	ReasonError   = "error"
)

// ClaimResolution is the vote tally of one active claim (spec §12).
type ClaimResolution struct {
	ClaimID     string `json:"claimId"`
	Status      string `json:"status"`
	AcceptCount int    `json:"acceptCount"`
	RejectCount int    `json:"rejectCount"`
	TotalVoters int    `json:"totalVoters"`
	Votes       []Vote `json:"votes"`
}

// RoundScore is a participant's score in one round.
type RoundScore struct {
	Round int     `json:"round"`
	Score float64 `json:"score"`
}

// Breakdown holds the mean of each scoring dimension.
type Breakdown struct {
	Correctness   float64 `json:"correctness"`
	Completeness  float64 `json:"completeness"`
	Actionability float64 `json:"actionability"`
	Consistency   float64 `json:"consistency"`
}

// ParticipantScore is one scoreboard row (spec §13).
type ParticipantScore struct {
	ParticipantID string       `json:"participantId"`
	Total         float64      `json:"total"`
	ByRound       []RoundScore `json:"byRound"`
	Breakdown     *Breakdown   `json:"breakdown,omitempty"`
}

// Representative is the selected spokesperson (spec §14).
type Representative struct {
	ParticipantID string  `json:"participantId"`
	Reason        string  `json:"reason"`
	Score         float64 `json:"score"`
	Speech        string  `json:"speech"`
}

// OpinionShift is one stance change in the deliberation trace.
type OpinionShift struct {
	ClaimID       string  `json:"claimId"`
	ParticipantID string  `json:"participantId"`
	From          string  `json:"from"`
	To            string  `json:"to"`
	Round         int     `json:"round"`
	Reason        *string `json:"reason,omitempty"`
}

// RoundHighlight is one output summary in the deliberation trace.
type RoundHighlight struct {
	Round         int    `json:"round"`
	ParticipantID string `json:"participantId"`
	Summary       string `json:"summary"`
}

// FinalReport is the report of a run (spec §15).
type FinalReport struct {
	Mode                 string           `json:"mode"`
	TraceIncluded        bool             `json:"traceIncluded"`
	TraceLevel           string           `json:"traceLevel"`
	FinalSummary         string           `json:"finalSummary"`
	RepresentativeSpeech string           `json:"representativeSpeech"`
	OpinionShiftTimeline []OpinionShift   `json:"opinionShiftTimeline,omitempty"`
	RoundHighlights      []RoundHighlight `json:"roundHighlights,omitempty"`

	hasTimeline   bool // the timeline key was present (possibly empty)
	hasHighlights bool
}

// Disagreement is one `disagree` judgement (spec §16).
type Disagreement struct {
	ClaimID       string `json:"claimId"`
	ParticipantID string `json:"participantId"`
	Reason        string `json:"reason"`
}

// Metrics are the run counters (spec §18).
type Metrics struct {
	ElapsedMs          int64 `json:"elapsedMs"`
	TotalRounds        int   `json:"totalRounds"`
	TotalTurns         int   `json:"totalTurns"`
	Retries            int   `json:"retries"`
	WaitTimeouts       int   `json:"waitTimeouts"`
	EarlyStopTriggered bool  `json:"earlyStopTriggered"`
	GlobalDeadlineHit  bool  `json:"globalDeadlineHit"`
}

// ActionOutput is the outcome of the optional action step (spec §17).
type ActionOutput struct {
	ActorID      string `json:"actorId"`
	Status       string `json:"status"`
	FullResponse string `json:"fullResponse,omitempty"`
	Summary      string `json:"summary,omitempty"`
	Error        string `json:"error,omitempty"`
}

// TaskInfo is the result's task block.
type TaskInfo struct {
	Prompt string `json:"prompt"`
	Title  string `json:"title"`
}

// Failure is a run failure: code and message as argue reports them.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Result is the result object of a finished run (spec §18). Fields appear in
// argue's order so result.json matches its shape.
type Result struct {
	ResultVersion    int                `json:"resultVersion"`
	RequestID        string             `json:"requestId"`
	SessionID        string             `json:"sessionId"`
	Task             TaskInfo           `json:"task"`
	Status           string             `json:"status"`
	FinalClaims      []Claim            `json:"finalClaims"`
	ClaimResolutions []ClaimResolution  `json:"claimResolutions"`
	Representative   Representative     `json:"representative"`
	Scoreboard       []ParticipantScore `json:"scoreboard"`
	Eliminations     []Elimination      `json:"eliminations"`
	Report           FinalReport        `json:"report"`
	Disagreements    []Disagreement     `json:"disagreements"`
	Rounds           []RoundRecord      `json:"rounds"`
	Metrics          Metrics            `json:"metrics"`
	Action           *ActionOutput      `json:"action,omitempty"`
	Error            *Failure           `json:"error,omitempty"`
}

// Run statuses.
const (
	StatusConsensus        = "consensus"
	StatusPartialConsensus = "partial_consensus"
	StatusUnresolved       = "unresolved"
	StatusInterrupted      = "interrupted"
)
