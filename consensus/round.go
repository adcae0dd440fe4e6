package consensus

import "slices"

// startRound dispatches one task per active participant, in request order,
// and arms the per-task timers and the round timer (spec §6.1, §8).
func (st *stepper) startRound(phase Phase, round int) {
	s := st.s
	wp := s.req.WaitingPolicy
	cur := &roundState{phase: phase, round: round, startedAt: st.at}
	// The round timer is min(perRound, max(1, deadline − elapsed)) (§8).
	window := wp.PerRoundTimeoutMs
	if d := wp.GlobalDeadlineMs; d != nil {
		remaining := *d - (st.at - s.startedAt)
		if remaining < 1 {
			remaining = 1
		}
		if remaining < window {
			window = remaining
		}
	}
	cur.timerDue = st.at + window
	s.cur = cur
	ids := make([]string, 0, s.activeCount)
	taskIDs := make([]string, 0, s.activeCount)
	cur.tasks = make([]taskSlot, 0, s.activeCount)
	for i, p := range s.req.Participants {
		if !s.active[i] {
			continue
		}
		slot := taskSlot{id: s.roundTaskID(round, p.ID), pid: p.ID, due: st.at + wp.PerTaskTimeoutMs}
		cur.tasks = append(cur.tasks, slot)
		ids = append(ids, p.ID)
		taskIDs = append(taskIDs, slot.id)
	}
	cur.pending = len(cur.tasks)
	st.fx = slices.Grow(st.fx, 2*len(cur.tasks)+2)
	for _, task := range s.pendingRoundTasks(cur) {
		st.add(DispatchTask{Task: task})
		st.add(SetTimer{ID: task.ID, Kind: TimerTask, At: task.TimeoutAt})
	}
	st.add(SetTimer{ID: s.roundTimerID(round), Kind: TimerRound, At: cur.timerDue})
	st.emit(EventRoundDispatched, &RoundDispatchedPayload{Phase: phase, Round: round,
		Participants: ids, TaskIDs: taskIDs}, st.at)
	if len(cur.tasks) == 0 {
		st.closeRound()
	}
}

// settleRoundTask records one task's outcome and emits its event with the
// settle time (spec §6.1 step 3, §9).
func (st *stepper) settleRoundTask(t *taskSlot, status taskStatus, out *Output, errMsg string) {
	s, cur := st.s, st.s.cur
	t.status = status
	cur.pending--
	st.add(ClearTimer{ID: t.id})
	if status == taskCompleted {
		out.respondedAtMs = st.at
		out.RespondedAt = st.iso(st.at)
		t.output = out
		s.totalTurns++
		st.emit(EventParticipantResponded, respondedPayload(out), st.at)
		return
	}
	reason := ReasonError
	if status == taskTimedOut {
		reason = ReasonTimeout
		cur.timedOut++
		s.waitTimeouts++
		st.add(CancelTask{TaskID: t.id})
	} else {
		cur.failed++
	}
	idx := s.req.participantIndex(t.pid)
	if idx < 0 || !s.active[idx] {
		return
	}
	s.active[idx] = false
	s.activeCount--
	s.eliminations = append(s.eliminations, Elimination{ParticipantID: t.pid, Round: cur.round,
		Reason: reason, At: st.iso(st.at), atMs: st.at})
	st.emit(EventParticipantEliminated, &ParticipantEliminatedPayload{Phase: cur.phase, Round: cur.round,
		ParticipantID: t.pid, Reason: reason, Error: errMsg}, st.at)
}

// expireRound settles every pending task as a round timeout, in dispatch
// order so replicas emit identical events.
func (st *stepper) expireRound() {
	cur := st.s.cur
	for i := range cur.tasks {
		if cur.tasks[i].status == taskPending {
			st.settleRoundTask(&cur.tasks[i], taskTimedOut, nil, "__round_timeout__")
		}
	}
	st.maybeCloseRound()
}

func (st *stepper) maybeCloseRound() {
	if st.s.life == LifeRunning && st.s.cur != nil && st.s.cur.pending == 0 {
		st.closeRound()
	}
}

// closeRound finishes the current round (spec §6.1 steps 4–6) and advances
// the run (§6).
func (st *stepper) closeRound() {
	s, cur := st.s, st.s.cur
	s.cur = nil
	st.add(ClearTimer{ID: s.roundTimerID(cur.round)})
	outputs := make([]*Output, 0, len(cur.tasks))
	for i := range cur.tasks {
		if cur.tasks[i].status == taskCompleted {
			outputs = append(outputs, cur.tasks[i].output)
		}
	}
	rec := RoundRecord{Round: cur.round, Outputs: outputs, AppliedMerges: []AppliedMerge{}, phase: cur.phase}
	newClaims := 0
	catalogSize := len(s.catalog)
	// A debate round that leaves too few participants is recorded but its
	// catalog changes are discarded (§6, §22.2): apply them to a scratch copy.
	discard := cur.phase == PhaseDebate && s.activeCount < s.minParticipants()
	if cur.phase != PhaseFinalVote {
		target := s
		if discard {
			target = s.scratchCatalog()
		}
		newClaims, rec.AppliedMerges = target.applyClaimUpdate(outputs, cur.round)
		catalogSize = len(target.catalog)
	}
	for _, m := range rec.AppliedMerges {
		st.emit(EventClaimsMerged, &ClaimsMergedPayload{Phase: cur.phase, Round: cur.round,
			SourceClaimID: m.SourceClaimID, MergedInto: m.TargetClaimID}, st.at)
	}
	st.emit(EventRoundCompleted, &RoundCompletedPayload{Phase: cur.phase, Round: cur.round,
		Completed: len(outputs), TimedOut: cur.timedOut, Failed: cur.failed,
		ActiveParticipants: s.ActiveParticipants(), ClaimCatalogSize: catalogSize,
		NewClaims: newClaims, MergeCount: len(rec.AppliedMerges)}, st.at)
	st.advance(cur.phase, cur.round, rec, newClaims)
}

// scratchCatalog returns a state holding a private copy of the catalog, for
// an update whose result is only reported, not kept.
func (s *State) scratchCatalog() *State {
	c := &State{catalog: make([]Claim, len(s.catalog))}
	copy(c.catalog, s.catalog)
	c.rebuildIndex()
	return c
}
