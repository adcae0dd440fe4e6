package consensus

import (
	"encoding/json"
	"fmt"
)

func decodeV1(r *rbuf) (*State, error) {
	s := &State{sessionID: r.str()}
	reqJSON := r.raw()
	if r.bad {
		return nil, fmt.Errorf("%w: truncated header", ErrCorruptState)
	}
	s.req = &Request{}
	if err := json.Unmarshal(reqJSON, s.req); err != nil {
		return nil, fmt.Errorf("%w: request: %s", ErrCorruptState, err.Error())
	}
	if err := s.req.Validate(); err != nil {
		return nil, fmt.Errorf("%w: request: %s", ErrCorruptState, err.Error())
	}
	s.startedAt = r.ivar()
	s.life = Lifecycle(r.u8())
	s.active = make([]bool, r.count())
	for i := range s.active {
		s.active[i] = r.boolean()
		if s.active[i] {
			s.activeCount++
		}
	}
	for n, i := r.count(), 0; i < n; i++ {
		e := Elimination{ParticipantID: r.str(), Round: r.num(), Reason: r.str(), atMs: r.ivar()}
		e.At = isoTime(e.atMs)
		s.eliminations = append(s.eliminations, e)
	}
	s.catalog = make([]Claim, r.count())
	for i := range s.catalog {
		decodeClaim(r, &s.catalog[i])
	}
	s.rounds = make([]RoundRecord, r.count())
	for i := range s.rounds {
		decodeRound(r, &s.rounds[i])
	}
	s.prevRound = r.num()
	s.cur = decodeCur(r)
	s.interrupted = r.boolean()
	s.interruptReason = r.str()
	s.deadlineHit = r.boolean()
	s.earlyStopped = r.boolean()
	s.totalTurns = r.num()
	s.waitTimeouts = r.num()
	s.eventCount = r.ivar()
	if r.boolean() {
		s.report = decodeReportState(r)
	}
	s.reportTask = decodePending(r)
	s.finalizingAt = r.ivar()
	s.actionTask = decodePending(r)
	if r.boolean() {
		s.action = &ActionOutput{ActorID: r.str(), Status: r.str(), FullResponse: r.str(), Summary: r.str(), Error: r.str()}
	}
	if r.boolean() {
		s.failure = &Failure{Code: r.str(), Message: r.str()}
	}
	s.finishedAt = r.ivar()
	if r.bad {
		return nil, fmt.Errorf("%w: truncated or malformed body", ErrCorruptState)
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptState, len(r.b)-r.off)
	}
	s.rebuildIndex()
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrCorruptState, err.Error())
	}
	return s, nil
}

func decodeClaim(r *rbuf, c *Claim) {
	c.ClaimID, c.Title, c.Statement, c.Category = r.str(), r.str(), r.str(), r.str()
	c.ProposedBy = make([]string, r.count())
	for i := range c.ProposedBy {
		c.ProposedBy[i] = r.str()
	}
	c.Status, c.MergedInto = r.str(), r.str()
}

func decodeRound(r *rbuf, rec *RoundRecord) {
	rec.Round = r.num()
	rec.phase = Phase(r.str())
	rec.Outputs = make([]*Output, r.count())
	for i := range rec.Outputs {
		rec.Outputs[i] = decodeOutput(r)
	}
	rec.AppliedMerges = make([]AppliedMerge, r.count())
	for i := range rec.AppliedMerges {
		m := &rec.AppliedMerges[i]
		m.SourceClaimID, m.TargetClaimID = r.str(), r.str()
		m.ParticipantIDs = make([]string, r.count())
		for k := range m.ParticipantIDs {
			m.ParticipantIDs[k] = r.str()
		}
	}
}

func decodeOutput(r *rbuf) *Output {
	o := &Output{ParticipantID: r.str(), Phase: Phase(r.str()), Round: r.num(), FullResponse: r.str(),
		Summary: r.str(), TaskTitle: r.str()}
	flags := r.u8()
	o.hasClaims = flags&outHasClaims != 0
	if n := r.count(); n > 0 || o.hasClaims {
		o.ExtractedClaims = make([]ExtractedClaim, n)
		for i := range o.ExtractedClaims {
			o.ExtractedClaims[i] = ExtractedClaim{Title: r.str(), Statement: r.str(), Category: r.str()}
		}
	}
	o.Judgements = make([]Judgement, r.count())
	for i := range o.Judgements {
		o.Judgements[i] = Judgement{ClaimID: r.str(), Stance: r.str(), Confidence: r.f64(), Rationale: r.str(),
			RevisedStatement: r.optStr(), MergesWith: r.optStr()}
	}
	if n := r.count(); n > 0 {
		o.ClaimVotes = make([]VoteInput, n)
		for i := range o.ClaimVotes {
			o.ClaimVotes[i] = VoteInput{ClaimID: r.str(), Vote: r.str(), Reason: r.optStr()}
		}
	}
	if flags&outHasSelfScore != 0 {
		f := r.f64()
		o.SelfScore = &f
	}
	o.respondedAtMs = r.ivar()
	o.RespondedAt = isoTime(o.respondedAtMs)
	return o
}

func decodeCur(r *rbuf) *roundState {
	if !r.boolean() {
		return nil
	}
	c := &roundState{phase: Phase(r.str()), round: r.num(), startedAt: r.ivar(), timerDue: r.ivar(),
		timedOut: r.num(), failed: r.num()}
	c.tasks = make([]taskSlot, r.count())
	for i := range c.tasks {
		t := &c.tasks[i]
		t.id, t.pid, t.due, t.status = r.str(), r.str(), r.ivar(), taskStatus(r.u8())
		if r.boolean() {
			t.output = decodeOutput(r)
		}
		if t.status == taskPending {
			c.pending++
		}
	}
	return c
}

func decodePending(r *rbuf) *pendingTask {
	if !r.boolean() {
		return nil
	}
	return &pendingTask{id: r.str(), pid: r.str(), due: r.ivar()}
}

func decodeReportState(r *rbuf) *FinalReport {
	rep := &FinalReport{Mode: r.str(), TraceIncluded: r.boolean(), TraceLevel: r.str(), FinalSummary: r.str(),
		RepresentativeSpeech: r.str()}
	rep.hasTimeline = r.boolean()
	if n := r.count(); n > 0 || rep.hasTimeline {
		rep.OpinionShiftTimeline = make([]OpinionShift, n)
		for i := range rep.OpinionShiftTimeline {
			rep.OpinionShiftTimeline[i] = OpinionShift{ClaimID: r.str(), ParticipantID: r.str(), From: r.str(),
				To: r.str(), Round: r.num(), Reason: r.optStr()}
		}
	}
	rep.hasHighlights = r.boolean()
	if n := r.count(); n > 0 || rep.hasHighlights {
		rep.RoundHighlights = make([]RoundHighlight, n)
		for i := range rep.RoundHighlights {
			rep.RoundHighlights[i] = RoundHighlight{Round: r.num(), ParticipantID: r.str(), Summary: r.str()}
		}
	}
	return rep
}

// check verifies the cross-references Apply relies on, so corrupt bytes give
// an error rather than a later panic.
func (s *State) check() error {
	switch {
	case s.sessionID == "":
		return fmt.Errorf("empty session id")
	case s.life < LifeRunning || s.life > LifeFailed:
		return fmt.Errorf("bad lifecycle %d", s.life)
	case len(s.active) != len(s.req.Participants):
		return fmt.Errorf("active set has %d entries for %d participants", len(s.active), len(s.req.Participants))
	case s.index.n != len(s.catalog):
		return fmt.Errorf("duplicate claim ids")
	case s.prevRound < -1 || s.prevRound >= len(s.rounds):
		return fmt.Errorf("bad previous round %d", s.prevRound)
	}
	if s.life == LifeRunning && s.cur == nil && s.reportTask == nil {
		return fmt.Errorf("running state waits for nothing")
	}
	if s.life == LifeFinalizing && s.actionTask == nil {
		return fmt.Errorf("finalizing state waits for nothing")
	}
	validPhase := func(p Phase) bool { return p == PhaseInitial || p == PhaseDebate || p == PhaseFinalVote }
	for ri := range s.rounds {
		if !validPhase(s.rounds[ri].phase) {
			return fmt.Errorf("bad phase %q", s.rounds[ri].phase)
		}
		for _, o := range s.rounds[ri].Outputs {
			if s.req.participantIndex(o.ParticipantID) < 0 {
				return fmt.Errorf("output of unknown participant %q", o.ParticipantID)
			}
		}
	}
	if c := s.cur; c != nil {
		if !validPhase(c.phase) || (c.phase != PhaseInitial && len(s.rounds) == 0) {
			return fmt.Errorf("bad current round %q", c.phase)
		}
		for i := range c.tasks {
			t := &c.tasks[i]
			if s.req.participantIndex(t.pid) < 0 || t.status > taskFailed || (t.status == taskCompleted) != (t.output != nil) {
				return fmt.Errorf("bad task slot %q", t.id)
			}
		}
	}
	if (s.life == LifeRunning || s.life == LifeFinalizing) && len(s.rounds) == 0 && s.cur == nil {
		return fmt.Errorf("no rounds")
	}
	return nil
}
