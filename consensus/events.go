package consensus

// Event types (spec §19).
const (
	EventSessionStarted        = "SessionStarted"
	EventRoundDispatched       = "RoundDispatched"
	EventParticipantResponded  = "ParticipantResponded"
	EventParticipantEliminated = "ParticipantEliminated"
	EventClaimsMerged          = "ClaimsMerged"
	EventRoundCompleted        = "RoundCompleted"
	EventEarlyStopTriggered    = "EarlyStopTriggered"
	EventGlobalDeadlineHit     = "GlobalDeadlineHit"
	EventConsensusDrafted      = "ConsensusDrafted"
	EventSessionInterrupted    = "SessionInterrupted"
	EventReportDispatched      = "ReportDispatched"
	EventReportCompleted       = "ReportCompleted"
	EventActionDispatched      = "ActionDispatched"
	EventActionCompleted       = "ActionCompleted"
	EventActionFailed          = "ActionFailed"
	EventFinalized             = "Finalized"
	EventFailed                = "Failed"
)

// Event is one entry of a run's event stream in argue's envelope. Seq is the
// event's position in the run (0-based) and AtMs its time; neither is part
// of the JSON envelope. Payload holds one of the *Payload types.
type Event struct {
	Seq       int64  `json:"-"`
	AtMs      int64  `json:"-"`
	SessionID string `json:"sessionId"`
	RequestID string `json:"requestId"`
	Type      string `json:"type"`
	At        string `json:"at"`
	Payload   any    `json:"payload,omitempty"`
}

func (st *stepper) emit(typ string, payload any, at int64) {
	s := st.s
	ev := &Event{Seq: s.eventCount, AtMs: at, SessionID: s.sessionID, RequestID: s.req.RequestID,
		Type: typ, At: st.iso(at), Payload: payload}
	s.eventCount++
	st.add(EmitEvent{Event: ev})
}

// SessionStartedPayload is the payload of SessionStarted.
type SessionStartedPayload struct {
	Participants    []string `json:"participants"`
	MinParticipants int64    `json:"minParticipants"`
}

// RoundDispatchedPayload is the payload of RoundDispatched.
type RoundDispatchedPayload struct {
	Phase        Phase    `json:"phase"`
	Round        int      `json:"round"`
	Participants []string `json:"participants"`
	TaskIDs      []string `json:"taskIds"`
}

// ParticipantRespondedPayload is the payload of ParticipantResponded.
type ParticipantRespondedPayload struct {
	Phase                 Phase            `json:"phase"`
	Round                 int              `json:"round"`
	ParticipantID         string           `json:"participantId"`
	Summary               string           `json:"summary"`
	ExtractedClaims       int              `json:"extractedClaims"`
	Judgements            int              `json:"judgements"`
	StanceAgree           int              `json:"stanceAgree"`
	StanceDisagree        int              `json:"stanceDisagree"`
	StanceRevise          int              `json:"stanceRevise"`
	ClaimVotes            int              `json:"claimVotes"`
	FullResponse          string           `json:"fullResponse"`
	ExtractedClaimsDetail []ExtractedClaim `json:"extractedClaimsDetail,omitempty"`
	JudgementsDetail      []Judgement      `json:"judgementsDetail"`
	ClaimVotesDetail      []VoteInput      `json:"claimVotesDetail,omitempty"`
}

func respondedPayload(o *Output) *ParticipantRespondedPayload {
	p := &ParticipantRespondedPayload{Phase: o.Phase, Round: o.Round, ParticipantID: o.ParticipantID,
		Summary: o.Summary, ExtractedClaims: len(o.ExtractedClaims), Judgements: len(o.Judgements),
		FullResponse: o.FullResponse, ExtractedClaimsDetail: o.ExtractedClaims, JudgementsDetail: o.Judgements}
	for _, j := range o.Judgements {
		switch j.Stance {
		case StanceAgree:
			p.StanceAgree++
		case StanceDisagree:
			p.StanceDisagree++
		case StanceRevise:
			p.StanceRevise++
		}
	}
	if o.Phase == PhaseFinalVote {
		p.ClaimVotes = len(o.ClaimVotes)
		p.ClaimVotesDetail = o.ClaimVotes
	}
	return p
}

// ParticipantEliminatedPayload is the payload of ParticipantEliminated.
type ParticipantEliminatedPayload struct {
	Phase         Phase  `json:"phase"`
	Round         int    `json:"round"`
	ParticipantID string `json:"participantId"`
	Reason        string `json:"reason"`
	Error         string `json:"error"`
}

// ClaimsMergedPayload is the payload of ClaimsMerged.
type ClaimsMergedPayload struct {
	Phase         Phase  `json:"phase"`
	Round         int    `json:"round"`
	SourceClaimID string `json:"sourceClaimId"`
	MergedInto    string `json:"mergedInto"`
}

// RoundCompletedPayload is the payload of RoundCompleted.
type RoundCompletedPayload struct {
	Phase              Phase    `json:"phase"`
	Round              int      `json:"round"`
	Completed          int      `json:"completed"`
	TimedOut           int      `json:"timedOut"`
	Failed             int      `json:"failed"`
	ActiveParticipants []string `json:"activeParticipants"`
	ClaimCatalogSize   int      `json:"claimCatalogSize"`
	NewClaims          int      `json:"newClaims"`
	MergeCount         int      `json:"mergeCount"`
}

// EarlyStopPayload is the payload of EarlyStopTriggered.
type EarlyStopPayload struct {
	Round  int    `json:"round"`
	Reason string `json:"reason"`
}

// GlobalDeadlinePayload is the payload of GlobalDeadlineHit.
type GlobalDeadlinePayload struct {
	Round            int   `json:"round"`
	GlobalDeadlineMs int64 `json:"globalDeadlineMs"`
}

// ConsensusDraftedPayload is the payload of ConsensusDrafted.
type ConsensusDraftedPayload struct {
	ClaimCount    int `json:"claimCount"`
	ResolvedCount int `json:"resolvedCount"`
}

// SessionInterruptedPayload is the payload of SessionInterrupted.
type SessionInterruptedPayload struct {
	Reason             string        `json:"reason"`
	ActiveParticipants []string      `json:"activeParticipants"`
	Eliminations       []Elimination `json:"eliminations"`
}

// ReportDispatchedPayload is the payload of ReportDispatched.
type ReportDispatchedPayload struct {
	ReporterID string `json:"reporterId"`
	Composer   string `json:"composer"`
}

// ReportCompletedPayload is the payload of ReportCompleted.
type ReportCompletedPayload struct {
	ReporterID string `json:"reporterId"`
	Mode       string `json:"mode"`
	Reason     string `json:"reason,omitempty"`
}

// ActionDispatchedPayload is the payload of ActionDispatched.
type ActionDispatchedPayload struct {
	ActorID string `json:"actorId"`
	Prompt  string `json:"prompt"`
}

// ActionCompletedPayload is the payload of ActionCompleted.
type ActionCompletedPayload struct {
	ActorID string `json:"actorId"`
	Summary string `json:"summary"`
}

// ActionFailedPayload is the payload of ActionFailed.
type ActionFailedPayload struct {
	ActorID string `json:"actorId"`
	Reason  string `json:"reason"`
}

// FinalizedPayload is the payload of Finalized.
type FinalizedPayload struct {
	Status         string `json:"status"`
	Representative string `json:"representative"`
}

// FailedPayload is the payload of Failed.
type FailedPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
