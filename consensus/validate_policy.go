package consensus

import (
	"encoding/json"
	"fmt"
	"strings"
)

// parsePolicies fills every defaulted policy block (spec §2.1). Open blocks
// drop unknown keys; reportPolicy and waitingPolicy are closed (§2.3).
func (v *validator) parsePolicies(r *Request, m map[string]any) {
	r.ParticipantsPolicy = ParticipantsPolicy{MinParticipants: 2, OnInsufficientParticipants: OnInsufficientInterrupt}
	if b := v.block(m, "participantsPolicy"); b != nil {
		v.integer(b, "minParticipants", "participantsPolicy", &r.ParticipantsPolicy.MinParticipants)
		v.str(b, "onInsufficientParticipants", "participantsPolicy", &r.ParticipantsPolicy.OnInsufficientParticipants, 0)
	}
	r.RoundPolicy = RoundPolicy{MinRounds: 2, MaxRounds: 3}
	if b := v.block(m, "roundPolicy"); b != nil {
		v.integer(b, "minRounds", "roundPolicy", &r.RoundPolicy.MinRounds)
		v.integer(b, "maxRounds", "roundPolicy", &r.RoundPolicy.MaxRounds)
	}
	r.SessionPolicy = SessionPolicy{Mode: SessionModeSticky}
	if b := v.block(m, "sessionPolicy"); b != nil {
		v.str(b, "mode", "sessionPolicy", &r.SessionPolicy.Mode, 0)
		v.str(b, "sessionKeyPrefix", "sessionPolicy", &r.SessionPolicy.SessionKeyPrefix, 1)
	}
	r.PeerContextPolicy = PeerContextPolicy{PassMode: PassModeFullPreferred, MaxCharsPerPeerResponse: 6000,
		MaxPeersPerRound: 10, OverflowStrategy: OverflowTruncateTail}
	if b := v.block(m, "peerContextPolicy"); b != nil {
		p := &r.PeerContextPolicy
		v.str(b, "passMode", "peerContextPolicy", &p.PassMode, 0)
		v.integer(b, "maxCharsPerPeerResponse", "peerContextPolicy", &p.MaxCharsPerPeerResponse)
		v.integer(b, "maxPeersPerRound", "peerContextPolicy", &p.MaxPeersPerRound)
		v.str(b, "overflowStrategy", "peerContextPolicy", &p.OverflowStrategy, 0)
	}
	v.parseScoring(r, m)
	r.ConsensusPolicy = ConsensusPolicy{Threshold: 1}
	if b := v.block(m, "consensusPolicy"); b != nil {
		v.float(b, "threshold", "consensusPolicy", &r.ConsensusPolicy.Threshold)
	}
	r.ReportPolicy = ReportPolicy{TraceLevel: TraceCompact, Composer: ComposerBuiltin}
	if b := v.block(m, "reportPolicy"); b != nil {
		p := &r.ReportPolicy
		v.closed(b, "reportPolicy", "includeDeliberationTrace", "traceLevel", "composer", "representativeId")
		v.boolean(b, "includeDeliberationTrace", "reportPolicy", &p.IncludeDeliberationTrace)
		v.str(b, "traceLevel", "reportPolicy", &p.TraceLevel, 0)
		v.str(b, "composer", "reportPolicy", &p.Composer, 0)
		v.str(b, "representativeId", "reportPolicy", &p.RepresentativeID, 1)
	}
	r.WaitingPolicy = WaitingPolicy{PerTaskTimeoutMs: defaultTimeoutMs, PerRoundTimeoutMs: defaultTimeoutMs}
	if b := v.block(m, "waitingPolicy"); b != nil {
		p := &r.WaitingPolicy
		v.closed(b, "waitingPolicy", "perTaskTimeoutMs", "perRoundTimeoutMs", "globalDeadlineMs")
		v.integer(b, "perTaskTimeoutMs", "waitingPolicy", &p.PerTaskTimeoutMs)
		v.integer(b, "perRoundTimeoutMs", "waitingPolicy", &p.PerRoundTimeoutMs)
		var d int64
		if v.integer(b, "globalDeadlineMs", "waitingPolicy", &d) {
			p.GlobalDeadlineMs = &d
		}
	}
}

func (v *validator) parseScoring(r *Request, m map[string]any) {
	r.ScoringPolicy = ScoringPolicy{Enabled: true, RepresentativeSelection: SelectionTopScore,
		TieBreaker: TieBreakLatestRound, Rubric: DefaultRubric()}
	b := v.block(m, "scoringPolicy")
	if b == nil {
		return
	}
	p := &r.ScoringPolicy
	v.boolean(b, "enabled", "scoringPolicy", &p.Enabled)
	v.str(b, "representativeSelection", "scoringPolicy", &p.RepresentativeSelection, 0)
	v.str(b, "tieBreaker", "scoringPolicy", &p.TieBreaker, 0)
	if rb, present := b["rubric"]; present {
		if rm, ok := v.object(rb, "scoringPolicy.rubric"); ok {
			v.float(rm, "correctness", "scoringPolicy.rubric", &p.Rubric.Correctness)
			v.float(rm, "completeness", "scoringPolicy.rubric", &p.Rubric.Completeness)
			v.float(rm, "actionability", "scoringPolicy.rubric", &p.Rubric.Actionability)
			v.float(rm, "consistency", "scoringPolicy.rubric", &p.Rubric.Consistency)
		}
	}
}

// parseOptionalBlocks reads the blocks that stay absent when omitted.
func (v *validator) parseOptionalBlocks(r *Request, m map[string]any) {
	if b := v.block(m, "actionPolicy"); b != nil {
		a := &ActionPolicy{IncludeFullResult: true}
		v.closed(b, "actionPolicy", "prompt", "actorId", "includeFullResult")
		v.required(b, "prompt", "actionPolicy", &a.Prompt)
		v.str(b, "actorId", "actionPolicy", &a.ActorID, 1)
		v.boolean(b, "includeFullResult", "actionPolicy", &a.IncludeFullResult)
		r.ActionPolicy = a
	}
	if b := v.block(m, "promptPolicy"); b != nil {
		p := &PromptPolicy{}
		v.str(b, "debateTemplate", "promptPolicy", &p.DebateTemplate, 1)
		v.str(b, "reportTemplate", "promptPolicy", &p.ReportTemplate, 1)
		r.PromptPolicy = p
	}
	if b := v.block(m, "constraints"); b != nil {
		c := &Constraints{}
		v.str(b, "language", "constraints", &c.Language, 1)
		var hint int64
		if v.integer(b, "tokenBudgetHint", "constraints", &hint) {
			c.TokenBudgetHint = &hint
		}
		r.Constraints = c
	}
	if val, present := m["context"]; present {
		if cm, ok := v.object(val, "context"); ok {
			// Re-encoding sorts keys and keeps numbers verbatim (json.Number),
			// so the stored bytes are canonical and identical on every replica.
			raw, err := json.Marshal(cm)
			if err != nil {
				v.add("context", "cannot be encoded: %s", err.Error())
				return
			}
			r.Context = raw
		}
	}
}

// validateInto checks ranges, enums and cross-field rules of a normalised
// request. Paths that already carry a decoding error are not reported twice.
func (r *Request) validateInto(v *validator) {
	had := make(map[string]bool, len(v.errs))
	for _, e := range v.errs {
		had[e.Path] = true
		if strings.HasPrefix(e.Path, "participants[") {
			had["participants"] = true // count checks would only repeat the element error
		}
	}
	add := func(path, format string, args ...any) {
		if !had[path] {
			had[path] = true
			v.add(path, format, args...)
		}
	}
	if r.RequestID == "" {
		add("requestId", "is required")
	}
	if r.Task == "" {
		add("task", "is required")
	}
	r.validateParticipants(add, had)
	r.validateRanges(add)
	r.validateEnums(add)
	if r.RoundPolicy.MaxRounds < r.RoundPolicy.MinRounds && !had["roundPolicy.minRounds"] {
		add("roundPolicy.maxRounds", "must be greater than or equal to roundPolicy.minRounds")
	}
	if !had["participants"] && !had["participantsPolicy.minParticipants"] &&
		int64(len(r.Participants)) < r.ParticipantsPolicy.MinParticipants {
		add("participants", "must have at least participantsPolicy.minParticipants (%d) entries",
			r.ParticipantsPolicy.MinParticipants)
	}
}

func (r *Request) validateParticipants(add func(string, string, ...any), had map[string]bool) {
	if len(r.Participants) < 2 {
		add("participants", "must have at least 2 entries")
	}
	if len(r.Participants) > MaxParticipants {
		add("participants", "must have at most %d entries", MaxParticipants)
	}
	seen := make(map[string]int, len(r.Participants))
	for i, p := range r.Participants {
		path := fmt.Sprintf("participants[%d].id", i)
		if p.ID == "" {
			add(path, "is required")
			continue
		}
		if j, dup := seen[p.ID]; dup {
			add(path, "duplicates participants[%d].id %q", j, p.ID)
			continue
		}
		seen[p.ID] = i
	}
}

func (r *Request) validateRanges(add func(string, string, ...any)) {
	atLeast := func(path string, val, min int64) {
		if val < min {
			add(path, "must be greater than or equal to %d", min)
		}
	}
	atLeast("participantsPolicy.minParticipants", r.ParticipantsPolicy.MinParticipants, 2)
	atLeast("roundPolicy.minRounds", r.RoundPolicy.MinRounds, 0)
	atLeast("roundPolicy.maxRounds", r.RoundPolicy.MaxRounds, 1)
	atLeast("peerContextPolicy.maxCharsPerPeerResponse", r.PeerContextPolicy.MaxCharsPerPeerResponse, 200)
	atLeast("peerContextPolicy.maxPeersPerRound", r.PeerContextPolicy.MaxPeersPerRound, 1)
	atLeast("waitingPolicy.perTaskTimeoutMs", r.WaitingPolicy.PerTaskTimeoutMs, 1000)
	atLeast("waitingPolicy.perRoundTimeoutMs", r.WaitingPolicy.PerRoundTimeoutMs, 1000)
	if d := r.WaitingPolicy.GlobalDeadlineMs; d != nil {
		atLeast("waitingPolicy.globalDeadlineMs", *d, 1000)
	}
	if c := r.Constraints; c != nil && c.TokenBudgetHint != nil && *c.TokenBudgetHint <= 0 {
		add("constraints.tokenBudgetHint", "must be greater than 0")
	}
	unit := func(path string, f float64) {
		if !(f >= 0 && f <= 1) {
			add(path, "must be between 0 and 1")
		}
	}
	rb := r.ScoringPolicy.Rubric
	unit("scoringPolicy.rubric.correctness", rb.Correctness)
	unit("scoringPolicy.rubric.completeness", rb.Completeness)
	unit("scoringPolicy.rubric.actionability", rb.Actionability)
	unit("scoringPolicy.rubric.consistency", rb.Consistency)
	unit("consensusPolicy.threshold", r.ConsensusPolicy.Threshold)
	if r.ActionPolicy != nil && r.ActionPolicy.Prompt == "" {
		add("actionPolicy.prompt", "is required")
	}
	if len(r.Context) > 0 && (r.Context[0] != '{') {
		add("context", "must be an object")
	}
}

func (r *Request) validateEnums(add func(string, string, ...any)) {
	oneOf := func(path, val string, allowed ...string) {
		for _, a := range allowed {
			if val == a {
				return
			}
		}
		add(path, "must be one of %s", strings.Join(quoteAll(allowed), ", "))
	}
	oneOf("participantsPolicy.onInsufficientParticipants", r.ParticipantsPolicy.OnInsufficientParticipants,
		OnInsufficientInterrupt, OnInsufficientFail)
	oneOf("sessionPolicy.mode", r.SessionPolicy.Mode, SessionModeSticky)
	oneOf("peerContextPolicy.passMode", r.PeerContextPolicy.PassMode, PassModeFullPreferred)
	oneOf("peerContextPolicy.overflowStrategy", r.PeerContextPolicy.OverflowStrategy,
		OverflowTruncateTail, OverflowTruncateMiddle)
	if !r.ScoringPolicy.Enabled {
		add("scoringPolicy.enabled", "must be true")
	}
	oneOf("scoringPolicy.representativeSelection", r.ScoringPolicy.RepresentativeSelection, SelectionTopScore)
	oneOf("scoringPolicy.tieBreaker", r.ScoringPolicy.TieBreaker, TieBreakLatestRound, TieBreakLeastObjection)
	oneOf("reportPolicy.traceLevel", r.ReportPolicy.TraceLevel, TraceCompact, TraceFull)
	oneOf("reportPolicy.composer", r.ReportPolicy.Composer, ComposerBuiltin, ComposerRepresentative)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
