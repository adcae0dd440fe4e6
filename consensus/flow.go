package consensus

import "fmt"

// advance applies spec §6's run algorithm after a round closed.
func (st *stepper) advance(phase Phase, round int, rec RoundRecord, newClaims int) {
	s := st.s
	switch phase {
	case PhaseInitial:
		s.rounds = append(s.rounds, rec)
		s.prevRound = len(s.rounds) - 1
		if s.activeCount < s.minParticipants() && !st.failOrInterrupt("initial round") {
			return
		}
		st.nextDebate(1)
	case PhaseDebate:
		s.rounds = append(s.rounds, rec)
		if s.activeCount < s.minParticipants() {
			// The catalog and peer outputs stay those of the previous round (§22.2).
			if st.failOrInterrupt(fmt.Sprintf("debate round %d", round)) {
				st.toFinalVote()
			}
			return
		}
		s.prevRound = len(s.rounds) - 1
		if int64(round) >= s.req.RoundPolicy.MinRounds && earlyStop(rec.Outputs, newClaims) {
			s.earlyStopped = true
			st.emit(EventEarlyStopTriggered, &EarlyStopPayload{Round: round, Reason: "all_agree_no_new_claims"}, st.at)
			st.toFinalVote()
			return
		}
		st.nextDebate(round + 1)
	case PhaseFinalVote:
		if s.activeCount < s.minParticipants() && !s.interrupted && !st.failOrInterrupt("final vote") {
			return
		}
		s.rounds = append(s.rounds, rec)
		st.finalize()
	}
}

// failOrInterrupt applies onInsufficientParticipants. It reports whether
// the run goes on (interrupt) rather than failing.
func (st *stepper) failOrInterrupt(where string) bool {
	s := st.s
	min := s.minParticipants()
	if s.req.ParticipantsPolicy.OnInsufficientParticipants == OnInsufficientFail {
		st.fail(Failure{Code: "Error", Message: fmt.Sprintf(
			"Round failed minimum participant requirement after %s: completed=%d, required=%d",
			where, s.activeCount, min)})
		return false
	}
	s.interrupted = true
	s.interruptReason = fmt.Sprintf("Discussion interrupted after %s: active=%d, required=%d",
		where, s.activeCount, min)
	return true
}

// nextDebate starts debate round r, or moves on to the final vote when the
// loop of §6 ends (interrupt, maxRounds, or the global deadline).
func (st *stepper) nextDebate(r int) {
	s := st.s
	if s.interrupted || int64(r) > s.req.RoundPolicy.MaxRounds {
		st.toFinalVote()
		return
	}
	if s.deadlinePassed(st.at) {
		st.hitDeadline(r)
		st.toFinalVote()
		return
	}
	st.startRound(PhaseDebate, r)
}

func (st *stepper) hitDeadline(round int) {
	s := st.s
	s.deadlineHit = true
	st.emit(EventGlobalDeadlineHit, &GlobalDeadlinePayload{Round: round,
		GlobalDeadlineMs: *s.req.WaitingPolicy.GlobalDeadlineMs}, st.at)
}

// toFinalVote runs the final vote on round lastRecorded+1 unless the
// deadline was hit or nobody is left (§5, §6).
func (st *stepper) toFinalVote() {
	s := st.s
	fv := s.rounds[len(s.rounds)-1].Round + 1
	if !s.deadlineHit && s.activeCount > 0 {
		if s.deadlinePassed(st.at) {
			st.hitDeadline(fv)
		} else {
			st.startRound(PhaseFinalVote, fv)
			return
		}
	}
	st.finalize()
}

// earlyStop is spec §11's rule over the outputs kept for a debate round.
func earlyStop(outputs []*Output, newClaims int) bool {
	if len(outputs) == 0 || newClaims > 0 {
		return false
	}
	for _, o := range outputs {
		if len(o.Judgements) == 0 {
			return false
		}
		for _, j := range o.Judgements {
			if j.Stance != StanceAgree || j.RevisedStatement != nil {
				return false
			}
		}
	}
	return true
}

// finalize drafts the consensus and starts the report (spec §6 tail).
func (st *stepper) finalize() {
	s := st.s
	if s.deadlineAt() != 0 {
		st.add(ClearTimer{ID: s.deadlineTimerID()})
	}
	v := s.view()
	resolved := 0
	for _, r := range v.resolutions {
		if r.Status == "resolved" {
			resolved++
		}
	}
	st.emit(EventConsensusDrafted, &ConsensusDraftedPayload{ClaimCount: len(v.resolutions),
		ResolvedCount: resolved}, st.at)
	if s.interrupted {
		st.emit(EventSessionInterrupted, &SessionInterruptedPayload{Reason: s.interruptReason,
			ActiveParticipants: s.ActiveParticipants(), Eliminations: s.eliminationList()}, st.at)
	}
	if s.req.ReportPolicy.Composer == ComposerRepresentative {
		st.startReport(v)
		return
	}
	rep := s.builtinReport(v)
	s.report = &rep
	st.enterFinalizing()
}

// enterFinalizing builds the result and runs the optional action (§17).
func (st *stepper) enterFinalizing() {
	s := st.s
	s.life = LifeFinalizing
	s.finalizingAt = st.at
	if s.req.ActionPolicy != nil {
		st.startAction()
		return
	}
	st.finish()
}

func (st *stepper) finish() {
	s := st.s
	s.life = LifeFinished
	s.finishedAt = st.at
	res := s.finalResult()
	st.emit(EventFinalized, &FinalizedPayload{Status: res.Status,
		Representative: res.Representative.ParticipantID}, st.at)
	st.add(Finish{Result: res})
}

func (s *State) eliminationList() []Elimination {
	out := make([]Elimination, len(s.eliminations))
	copy(out, s.eliminations)
	return out
}
