package consensus

// runView is everything derived from the recorded rounds once the final
// vote is over; it never changes afterwards, so it is computed once per
// decoded state.
type runView struct {
	resolutions []ClaimResolution
	scoreboard  []ParticipantScore
	rep         Representative
	status      string
}

// view is only used once the final vote is over, when rounds, catalog and
// the active set no longer change, so it is cached (not encoded: a decoded
// state recomputes the same values).
func (s *State) view() *runView {
	if s.viewCache != nil {
		return s.viewCache
	}
	v := &runView{resolutions: s.resolutions(), scoreboard: s.scoreboard()}
	v.rep = s.pickRepresentative(v.scoreboard)
	v.status = s.status(v.resolutions)
	s.viewCache = v
	return v
}

// finalVoteOutputs returns the outputs of the recorded final vote, if any.
func (s *State) finalVoteOutputs() []*Output {
	if n := len(s.rounds); n > 0 && s.rounds[n-1].phase == PhaseFinalVote {
		return s.rounds[n-1].Outputs
	}
	return nil
}

// resolutions applies spec §12 to every active claim in catalog order.
func (s *State) resolutions() []ClaimResolution {
	outputs := s.finalVoteOutputs()
	votes := 0
	for _, o := range outputs {
		votes += len(o.ClaimVotes)
	}
	// pos, counts, last and target are temporaries: one pooled block.
	sc := getScratch()
	defer sc.release()
	n := len(s.catalog)
	tmp := sc.int32s(3*n + votes)
	pos, tmp := tmp[:n:n], tmp[n:] // catalog position -> index in out, -1 when not active
	active := 0
	for i := range s.catalog {
		pos[i] = -1
		if s.catalog[i].Status == ClaimActive {
			pos[i] = int32(active)
			active++
		}
	}
	out := make([]ClaimResolution, active)
	for i := range s.catalog {
		if k := pos[i]; k >= 0 {
			out[k].ClaimID = s.catalog[i].ClaimID
		}
	}
	counts, tmp := tmp[:active:active], tmp[active:]
	last, tmp := tmp[:active:active], tmp[active:]
	target, total := s.voteTargets(outputs, pos, counts, tmp[:0:votes])
	// Each claim's votes get a window of one shared block, sized by the
	// count of votes naming it (duplicates included, so an upper bound): no
	// slice ever grows.
	block := make([]Vote, total)
	for k := range out {
		c := int(counts[k])
		out[k].Votes, block = block[:0:c], block[c:]
	}
	fillVotes(out, outputs, target, last)
	threshold := s.req.ConsensusPolicy.Threshold
	for k := range out {
		r := &out[k]
		for i := range r.Votes {
			if r.Votes[i].Vote == VoteAccept {
				r.AcceptCount++
			} else {
				r.RejectCount++
			}
		}
		r.TotalVoters = len(r.Votes)
		r.Status = "unresolved"
		if !s.deadlineHit && r.TotalVoters > 0 && float64(r.AcceptCount)/float64(r.TotalVoters) >= threshold {
			r.Status = "resolved"
		}
	}
	return out
}

// fillVotes records the votes of outputs in the resolutions, in order;
// target holds each vote's resolution index (-1 for none), last is zeroed
// scratch of len(out). A later vote of a participant on a claim replaces
// its earlier one in place.
func fillVotes(out []ClaimResolution, outputs []*Output, target, last []int32) {
	// last[k] is 1 + the index of the output that cast claim k's latest
	// vote. When the outputs' participants are distinct (always, for a run
	// Apply built), a vote can only repeat one of its own output's, which is
	// then the last vote of the claim; otherwise every vote is searched.
	distinct := distinctParticipants(outputs)
	for oi, o := range outputs {
		for _, v := range o.ClaimVotes {
			k := target[0]
			target = target[1:]
			if k < 0 {
				continue
			}
			r := &out[k]
			x := -1 // the vote this one replaces
			if distinct {
				if last[k] == int32(oi+1) {
					x = len(r.Votes) - 1
				}
			} else {
				for i := range r.Votes {
					if r.Votes[i].ParticipantID == o.ParticipantID {
						x = i
					}
				}
			}
			last[k] = int32(oi + 1)
			if x < 0 {
				x = len(r.Votes)
				r.Votes = r.Votes[:x+1]
			}
			// Field by field: cheaper than copying a Vote value while the
			// garbage collector is marking.
			p := &r.Votes[x]
			p.ParticipantID, p.ClaimID, p.Vote = o.ParticipantID, v.ClaimID, v.Vote
			if v.Reason != nil || p.Reason != nil {
				p.Reason = v.Reason // skips a barriered store of nil over nil
			}
		}
	}
}

// voteTargets appends to target, for every vote of outputs in order, the
// index in the resolutions of the active claim it names (-1 for none), and
// counts the votes per resolution in counts (zeroed, one per resolution).
func (s *State) voteTargets(outputs []*Output, pos, counts, target []int32) ([]int32, int) {
	total := 0
	next := 0 // agents vote in catalog order: try the claim after the last one first
	for _, o := range outputs {
		for _, v := range o.ClaimVotes {
			k := int32(-1)
			if next < len(s.catalog) && s.catalog[next].ClaimID == v.ClaimID {
				k = pos[next]
				next++
			} else if i, ok := s.claimPos(v.ClaimID); ok {
				k = pos[i]
				next = i + 1
			}
			target = append(target, k)
			if k >= 0 {
				counts[k]++
				total++
			}
		}
	}
	return target, total
}

// distinctParticipants reports whether no two outputs share a participant.
func distinctParticipants(outputs []*Output) bool {
	for i := range outputs {
		for j := i + 1; j < len(outputs); j++ {
			if outputs[i].ParticipantID == outputs[j].ParticipantID {
				return false
			}
		}
	}
	return true
}

// status is the run status table of §12.
func (s *State) status(res []ClaimResolution) string {
	switch {
	case s.interrupted:
		return StatusInterrupted
	case s.deadlineHit, len(res) == 0:
		return StatusUnresolved
	}
	resolved := 0
	for _, r := range res {
		if r.Status == "resolved" {
			resolved++
		}
	}
	switch {
	case resolved == len(res):
		return StatusConsensus
	case resolved > 0:
		return StatusPartialConsensus
	}
	return StatusUnresolved
}

// pickRepresentative is spec §14.
func (s *State) pickRepresentative(board []ParticipantScore) Representative {
	cands := make([]ParticipantScore, 0, len(board))
	for _, ps := range board {
		if s.isActive(ps.ParticipantID) {
			cands = append(cands, ps)
		}
	}
	if len(cands) == 0 {
		cands = board
	}
	var rep Representative
	if d := s.req.ReportPolicy.RepresentativeID; d != "" && s.isActive(d) {
		rep = Representative{ParticipantID: d, Reason: "host-designated"}
		for _, ps := range cands {
			if ps.ParticipantID == d {
				rep.Score = ps.Total
			}
		}
	} else if len(cands) > 0 {
		rep = s.topScore(cands)
	}
	rep.Speech = s.speech(rep.ParticipantID)
	return rep
}

func (s *State) topScore(cands []ParticipantScore) Representative {
	top := cands[0].Total
	var tied []ParticipantScore
	for _, c := range cands {
		if c.Total == top {
			tied = append(tied, c)
		}
	}
	if len(tied) == 1 {
		return Representative{ParticipantID: tied[0].ParticipantID, Reason: "top-score", Score: top}
	}
	best := tied[0]
	better := func(a, b ParticipantScore) bool { // is a preferred to b?
		if s.req.ScoringPolicy.TieBreaker == TieBreakLeastObjection {
			oa, ob := s.objections(a.ParticipantID), s.objections(b.ParticipantID)
			if oa != ob {
				return oa < ob
			}
		} else {
			la, lb := lastRoundScore(a), lastRoundScore(b)
			if la != lb {
				return la > lb
			}
		}
		return a.ParticipantID < b.ParticipantID
	}
	for _, c := range tied[1:] {
		if better(c, best) {
			best = c
		}
	}
	return Representative{ParticipantID: best.ParticipantID, Reason: "tie-breaker", Score: top}
}

func lastRoundScore(ps ParticipantScore) float64 {
	if n := len(ps.ByRound); n > 0 {
		return ps.ByRound[n-1].Score
	}
	return 0
}

// objections counts a participant's disagree judgements over all rounds.
func (s *State) objections(pid string) int {
	n := 0
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			if o.ParticipantID != pid {
				continue
			}
			for _, j := range o.Judgements {
				if j.Stance == StanceDisagree {
					n++
				}
			}
		}
	}
	return n
}

// latestOutput returns pid's highest-numbered output, or nil.
func (s *State) latestOutput(pid string) *Output {
	var best *Output
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			if o.ParticipantID == pid && (best == nil || o.Round >= best.Round) {
				best = o
			}
		}
	}
	return best
}

func (s *State) speech(pid string) string {
	if o := s.latestOutput(pid); o != nil {
		return o.FullResponse
	}
	return pid + " has no available output."
}

// title is spec §16's task title.
func (s *State) title(repID string, board []ParticipantScore) string {
	initial := func(pid string) string {
		if len(s.rounds) == 0 || s.rounds[0].phase != PhaseInitial {
			return ""
		}
		for _, o := range s.rounds[0].Outputs {
			if o.ParticipantID == pid {
				return o.TaskTitle
			}
		}
		return ""
	}
	if t := initial(repID); t != "" {
		return t
	}
	for _, ps := range board {
		if ps.ParticipantID == repID {
			continue
		}
		if t := initial(ps.ParticipantID); t != "" {
			return t
		}
	}
	t := jsTrim(s.req.Task)
	switch {
	case t == "":
		return "Untitled argue session"
	case utf16Len(t) <= MaxTaskTitle:
		return t
	}
	return utf16Prefix(t, MaxTaskTitle-1) + "…"
}

// disagreements lists every disagree judgement of every recorded round.
func (s *State) disagreements() []Disagreement {
	n := 0
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			for _, j := range o.Judgements {
				if j.Stance == StanceDisagree {
					n++
				}
			}
		}
	}
	out := make([]Disagreement, 0, n)
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			for _, j := range o.Judgements {
				if j.Stance == StanceDisagree {
					out = append(out, Disagreement{ClaimID: j.ClaimID, ParticipantID: o.ParticipantID, Reason: j.Rationale})
				}
			}
		}
	}
	return out
}

// baseResult builds the result object without the action (spec §18), as it
// stands when the run enters finalizing.
func (s *State) baseResult() *Result {
	v := s.view()
	res := &Result{
		ResultVersion: 1, RequestID: s.req.RequestID, SessionID: s.sessionID,
		Task:   TaskInfo{Prompt: s.req.Task, Title: s.title(v.rep.ParticipantID, v.scoreboard)},
		Status: v.status, FinalClaims: s.sharedCatalog(), ClaimResolutions: v.resolutions,
		Representative: v.rep, Scoreboard: v.scoreboard, Eliminations: s.eliminationList(),
		Disagreements: s.disagreements(), Rounds: append([]RoundRecord{}, s.rounds...),
	}
	if s.report != nil {
		res.Report = *s.report
	}
	elapsed := s.finalizingAt - s.startedAt
	if elapsed < 0 {
		elapsed = 0
	}
	res.Metrics = Metrics{ElapsedMs: elapsed, TotalRounds: len(s.rounds), TotalTurns: s.totalTurns,
		WaitTimeouts: s.waitTimeouts, EarlyStopTriggered: s.earlyStopped, GlobalDeadlineHit: s.deadlineHit}
	if s.interrupted {
		res.Error = &Failure{Code: "INSUFFICIENT_PARTICIPANTS", Message: s.interruptReason}
	}
	return res
}

// finalResult is the base result plus the action outcome.
func (s *State) finalResult() *Result {
	res := s.baseResult()
	if s.action != nil {
		a := *s.action
		res.Action = &a
	}
	return res
}
