package consensus

import (
	"encoding/json"
	"math"
	"unicode/utf8"
)

// cloneRequest returns the run's private, canonical copy of r: the request
// as a JSON round trip gives it back. The round trip canonicalises the few
// values JSON cannot carry as they are (invalid UTF-8 becomes U+FFFD, the
// context is compacted and HTML-escaped) and refuses the ones it cannot
// encode (NaN, infinities, a malformed context), so the copy is exactly what
// EncodeState embeds and DecodeState restores. When the round trip is the
// identity (no context, every string valid UTF-8, every float finite) a
// plain deep copy gives the same value far cheaper; the round trip remains
// for everything else. TestCopyRequest_CoversEveryField keeps copyRequest
// in step with the fields of Request.
func cloneRequest(r *Request) (*Request, error) {
	if c, ok := copyRequest(r); ok {
		return c, nil
	}
	return cloneRequestJSON(r)
}

func cloneRequestJSON(r *Request) (*Request, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Path: "", Message: "request does not encode: " + err.Error()}}}
	}
	c := &Request{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Path: "", Message: "request does not decode: " + err.Error()}}}
	}
	return c, nil
}

// copyRequest deep-copies r when its JSON round trip is the identity, and
// reports false otherwise.
func copyRequest(r *Request) (*Request, bool) {
	if r.Context != nil || !jsonIdentity(r) {
		return nil, false
	}
	c := *r
	if r.Participants != nil {
		c.Participants = make([]Participant, len(r.Participants))
		for i, p := range r.Participants {
			c.Participants[i] = Participant{ID: p.ID, Role: clonePtr(p.Role)}
		}
	}
	c.ActionPolicy = clonePtr(r.ActionPolicy)
	c.PromptPolicy = clonePtr(r.PromptPolicy)
	c.WaitingPolicy.GlobalDeadlineMs = clonePtr(r.WaitingPolicy.GlobalDeadlineMs)
	if r.Constraints != nil {
		k := *r.Constraints
		k.TokenBudgetHint = clonePtr(k.TokenBudgetHint)
		c.Constraints = &k
	}
	return &c, true
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// jsonIdentity reports whether every string of r is valid UTF-8 and every
// float finite (the context is checked by the caller).
func jsonIdentity(r *Request) bool {
	strs := [...]string{r.RequestID, r.Task, r.ParticipantsPolicy.OnInsufficientParticipants,
		r.SessionPolicy.Mode, r.SessionPolicy.SessionKeyPrefix, r.PeerContextPolicy.PassMode,
		r.PeerContextPolicy.OverflowStrategy, r.ScoringPolicy.RepresentativeSelection, r.ScoringPolicy.TieBreaker,
		r.ReportPolicy.TraceLevel, r.ReportPolicy.Composer, r.ReportPolicy.RepresentativeID}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return false
		}
	}
	for _, p := range r.Participants {
		if !utf8.ValidString(p.ID) || p.Role != nil && !utf8.ValidString(*p.Role) {
			return false
		}
	}
	if a := r.ActionPolicy; a != nil && (!utf8.ValidString(a.Prompt) || !utf8.ValidString(a.ActorID)) {
		return false
	}
	if p := r.PromptPolicy; p != nil && (!utf8.ValidString(p.DebateTemplate) || !utf8.ValidString(p.ReportTemplate)) {
		return false
	}
	if c := r.Constraints; c != nil && !utf8.ValidString(c.Language) {
		return false
	}
	w := r.ScoringPolicy.Rubric
	for _, f := range [...]float64{w.Correctness, w.Completeness, w.Actionability, w.Consistency, r.ConsensusPolicy.Threshold} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
}
