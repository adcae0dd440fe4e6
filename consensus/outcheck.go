package consensus

import (
	"fmt"
	"math"
)

// The validation half of the round-output decoder: the checks of the
// output schema, in the order (and with the messages) the reference
// decoder applies them, followed by the construction of the Output. All
// strings of the Output are substrings of one arena string.

// arenaText is the decoder's arena as one string.
type arenaText string

func (a arenaText) at(sp span) string { return string(a[sp.off:sp.end]) }

// optText is text() for a decoded optional string of length n.
func optText(set bool, n int, required, minOne bool, max int) string {
	if !set {
		if required {
			return " is required"
		}
		return ""
	}
	if minOne && n == 0 {
		return " must not be empty"
	}
	if n > max {
		return fmt.Sprintf(" exceeds %d bytes", max)
	}
	return ""
}

// required validates a required non-empty string of length n decoded into
// a plain string field (absent and "" fail alike).
func required(n, max int) string {
	if n == 0 {
		return " is required and must not be empty"
	}
	if n > max {
		return fmt.Sprintf(" exceeds %d bytes", max)
	}
	return ""
}

// item names list element i of field list, e.g. output.judgements[3].
func item(list string, i int, field string) string {
	return fmt.Sprintf("output.%s[%d].%s", list, i, field)
}

// result runs every check of the output schema that does not depend on
// the task and records, per group, the first problem in the reference
// decoder's order; RoundResult.check adds the task-dependent ones in
// between (see RoundResult).
func (d *outDecoder) result() *RoundResult {
	if !d.kind.set || d.kind.code != 1 {
		return fatalResult(`kind must be "round"`)
	}
	if !d.hasOutput {
		return fatalResult("output is required")
	}
	a := arenaText(d.arena)
	r := &d.out
	rr := &RoundResult{}
	if r.participantID.set {
		rr.decl |= declPID
		rr.declPID = a.at(r.participantID.span)
	}
	if r.phase.set {
		rr.decl |= declPhase
		rr.declPhase = a.at(r.phase.span)
	}
	if r.round.set {
		rr.decl |= declRound
		rr.declRound = r.round.v
	}
	rr.fieldErr = checkFields(r)
	if m := optText(r.taskTitle.set, r.taskTitle.len(), true, true, MaxTextBytes); m != "" {
		rr.titleErr = "output.taskTitle" + m
	} else if utf16Len(a.at(r.taskTitle.span)) > MaxTaskTitle {
		rr.titleErr = fmt.Sprintf("output.taskTitle exceeds %d characters", MaxTaskTitle)
	}
	rr.hasVotes = r.votes.set
	rr.votesErr = checkVotes(r)
	if rr.listErr = checkClaims(&r.claims); rr.listErr == "" {
		rr.listErr = checkJudgements(&r.judgements)
	}
	r.assemble(a, rr)
	return rr
}

// checkFields checks the fields every phase has, after the task binding.
func checkFields(r *outputSpans) string {
	if m := optText(r.fullResponse.set, r.fullResponse.len(), true, true, MaxTextBytes); m != "" {
		return "output.fullResponse" + m
	}
	if m := optText(r.summary.set, r.summary.len(), true, true, MaxTextBytes); m != "" {
		return "output.summary" + m
	}
	if m := optText(r.respondedAt.set, r.respondedAt.n, false, true, MaxIDBytes); m != "" {
		return "output.respondedAt" + m
	}
	if r.selfScore.set && !(r.selfScore.v >= 0 && r.selfScore.v <= 100) {
		return "output.selfScore must be between 0 and 100"
	}
	return ""
}

// checkVotes checks claimVotes as the final vote requires them.
func checkVotes(r *outputSpans) string {
	votes := r.votes.items()
	if !r.votes.set || len(votes) == 0 {
		return "output.claimVotes must have at least 1 entry"
	}
	if len(votes) > MaxListLen {
		return fmt.Sprintf("output.claimVotes exceeds %d entries", MaxListLen)
	}
	for i := range votes {
		v := &votes[i]
		if m := required(v.claimID.len(), MaxIDBytes); m != "" {
			return item("claimVotes", i, "claimId") + m
		}
		if v.vote == 0 {
			return item("claimVotes", i, "vote") + ` must be "accept" or "reject"`
		}
		if m := optText(v.reason.set, v.reason.len(), false, false, MaxTextBytes); m != "" {
			return item("claimVotes", i, "reason") + m
		}
	}
	return ""
}

func checkClaims(l *list[claimSpans]) string {
	if !l.set {
		return ""
	}
	claims := l.items()
	if len(claims) > MaxListLen {
		return fmt.Sprintf("output.extractedClaims exceeds %d entries", MaxListLen)
	}
	for i := range claims {
		c := &claims[i]
		if m := required(c.title.len(), MaxTextBytes); m != "" {
			return item("extractedClaims", i, "title") + m
		}
		if m := required(c.statement.len(), MaxTextBytes); m != "" {
			return item("extractedClaims", i, "statement") + m
		}
		if m := optText(c.claimID.set, c.claimID.n, false, true, MaxIDBytes); m != "" {
			return item("extractedClaims", i, "claimId") + m
		}
		if c.category.set && c.category.code == 0 {
			return item("extractedClaims", i, "category") + " must be one of pro, con, risk, tradeoff, todo"
		}
	}
	return ""
}

func checkJudgements(l *list[judgementSpans]) string {
	if !l.set {
		return "output.judgements is required"
	}
	js := l.items()
	if len(js) > MaxListLen {
		return fmt.Sprintf("output.judgements exceeds %d entries", MaxListLen)
	}
	for i := range js {
		j := &js[i]
		if m := optText(j.revised.set, j.revised.len(), false, true, MaxTextBytes); m != "" {
			return item("judgements", i, "revisedStatement") + m
		}
		if m := optText(j.merges.set, j.merges.len(), false, true, MaxIDBytes); m != "" {
			return item("judgements", i, "mergesWith") + m
		}
		if m := required(j.claimID.len(), MaxIDBytes); m != "" {
			return item("judgements", i, "claimId") + m
		}
		if m := required(j.rationale.len(), MaxTextBytes); m != "" {
			return item("judgements", i, "rationale") + m
		}
		if j.stance == 0 {
			return item("judgements", i, "stance") + " must be agree, disagree or revise"
		}
		c := j.confidence
		if !c.set || !(c.v >= 0 && c.v <= 1) || math.IsNaN(c.v) {
			return item("judgements", i, "confidence") + " must be a number between 0 and 1"
		}
	}
	return ""
}

var (
	categoryText = [...]string{"", "pro", "con", "risk", "tradeoff", "todo"}
	stanceText   = [...]string{"", StanceAgree, StanceDisagree, StanceRevise}
	voteText     = [...]string{"", VoteAccept, VoteReject}
)

// assemble builds rr's output of validated spans, unless no task could
// accept it. Optional strings (reasons, revisions, merge targets) point
// into one shared block; the votes are kept only when a final vote could
// accept them, the title only when an initial round could.
func (r *outputSpans) assemble(a arenaText, rr *RoundResult) {
	if !rr.usable() {
		return
	}
	out := &rr.out
	*out = Output{FullResponse: a.at(r.fullResponse.span), Summary: a.at(r.summary.span)}
	if rr.titleErr == "" {
		out.TaskTitle = a.at(r.taskTitle.span)
	}
	if r.selfScore.set {
		rr.selfScore = r.selfScore.v
		out.SelfScore = &rr.selfScore
	}
	votes, js := r.votes.items(), r.judgements.items()
	if !rr.hasVotes {
		votes = nil
	}
	opt := make([]string, 0, r.optionalCount(votes))
	if len(votes) > 0 {
		out.ClaimVotes = make([]VoteInput, len(votes))
		for i := range votes {
			v := &votes[i]
			out.ClaimVotes[i] = VoteInput{ClaimID: a.at(v.claimID), Vote: voteText[v.vote]}
			out.ClaimVotes[i].Reason, opt = a.opt(v.reason, opt)
		}
	}
	if r.claims.set {
		claims := r.claims.items()
		out.hasClaims = true
		out.ExtractedClaims = make([]ExtractedClaim, len(claims))
		for i := range claims {
			c := &claims[i]
			out.ExtractedClaims[i] = ExtractedClaim{Title: a.at(c.title), Statement: a.at(c.statement),
				Category: categoryText[c.category.code]}
		}
	}
	out.Judgements = make([]Judgement, len(js))
	for i := range js {
		j := &js[i]
		o := &out.Judgements[i]
		*o = Judgement{ClaimID: a.at(j.claimID), Stance: stanceText[j.stance], Confidence: j.confidence.v,
			Rationale: a.at(j.rationale)}
		o.RevisedStatement, opt = a.opt(j.revised, opt)
		o.MergesWith, opt = a.opt(j.merges, opt)
	}
}

// optionalCount is the number of optional strings assemble stores.
func (r *outputSpans) optionalCount(votes []voteSpans) int {
	n := 0
	for _, v := range votes {
		if v.reason.set {
			n++
		}
	}
	for _, j := range r.judgements.items() {
		if j.revised.set {
			n++
		}
		if j.merges.set {
			n++
		}
	}
	return n
}

// opt stores an optional string in block (whose capacity was reserved) and
// returns a pointer to it, or nil when absent.
func (a arenaText) opt(sp optSpan, block []string) (*string, []string) {
	if !sp.set {
		return nil, block
	}
	block = append(block, a.at(sp.span))
	return &block[len(block)-1], block
}
