package consensus

import (
	"encoding/json"
	"fmt"
)

// stateMagic starts every encoded state; StateVersion follows as a uvarint.
const stateMagic = "CRS\x00"

// StateVersion is the state encoding this binary writes. DecodeState reads
// every version up to it; a format change bumps it and keeps a decoder for
// each older version (with a committed fixture test).
const StateVersion = 1

// EncodeState serialises s in the versioned binary format described in
// DESIGN.md. Equal states encode to equal bytes. It does not modify s.
func EncodeState(s *State) []byte {
	w := &wbuf{b: make([]byte, 0, 4096)}
	w.b = append(w.b, stateMagic...)
	w.uvar(StateVersion)
	reqJSON, err := json.Marshal(s.req)
	if err != nil {
		// A validated Request holds only strings, numbers and compact JSON.
		panic("consensus: request does not encode: " + err.Error())
	}
	w.str(s.sessionID)
	w.bytes(reqJSON)
	w.ivar(s.startedAt)
	w.u8(uint8(s.life))
	w.count(len(s.active))
	for _, a := range s.active {
		w.boolean(a)
	}
	w.count(len(s.eliminations))
	for _, e := range s.eliminations {
		w.str(e.ParticipantID)
		w.num(e.Round)
		w.str(e.Reason)
		w.ivar(e.atMs)
	}
	w.count(len(s.catalog))
	for i := range s.catalog {
		encodeClaim(w, &s.catalog[i])
	}
	w.count(len(s.rounds))
	for i := range s.rounds {
		encodeRound(w, &s.rounds[i])
	}
	w.num(s.prevRound)
	encodeCur(w, s.cur)
	w.boolean(s.interrupted)
	w.str(s.interruptReason)
	w.boolean(s.deadlineHit)
	w.boolean(s.earlyStopped)
	w.num(s.totalTurns)
	w.num(s.waitTimeouts)
	w.ivar(s.eventCount)
	w.boolean(s.report != nil)
	if s.report != nil {
		encodeReport(w, s.report)
	}
	encodePending(w, s.reportTask)
	w.ivar(s.finalizingAt)
	encodePending(w, s.actionTask)
	w.boolean(s.action != nil)
	if a := s.action; a != nil {
		w.str(a.ActorID)
		w.str(a.Status)
		w.str(a.FullResponse)
		w.str(a.Summary)
		w.str(a.Error)
	}
	w.boolean(s.failure != nil)
	if f := s.failure; f != nil {
		w.str(f.Code)
		w.str(f.Message)
	}
	w.ivar(s.finishedAt)
	return w.b
}

func encodeClaim(w *wbuf, c *Claim) {
	w.str(c.ClaimID)
	w.str(c.Title)
	w.str(c.Statement)
	w.str(c.Category)
	w.count(len(c.ProposedBy))
	for _, p := range c.ProposedBy {
		w.str(p)
	}
	w.str(c.Status)
	w.str(c.MergedInto)
}

func encodeRound(w *wbuf, r *RoundRecord) {
	w.num(r.Round)
	w.str(string(r.phase))
	w.count(len(r.Outputs))
	for _, o := range r.Outputs {
		encodeOutput(w, o)
	}
	w.count(len(r.AppliedMerges))
	for _, m := range r.AppliedMerges {
		w.str(m.SourceClaimID)
		w.str(m.TargetClaimID)
		w.count(len(m.ParticipantIDs))
		for _, p := range m.ParticipantIDs {
			w.str(p)
		}
	}
}

const (
	outHasClaims = 1 << iota
	outHasSelfScore
)

func encodeOutput(w *wbuf, o *Output) {
	w.str(o.ParticipantID)
	w.str(string(o.Phase))
	w.num(o.Round)
	w.str(o.FullResponse)
	w.str(o.Summary)
	w.str(o.TaskTitle)
	var flags uint8
	if o.hasClaims {
		flags |= outHasClaims
	}
	if o.SelfScore != nil {
		flags |= outHasSelfScore
	}
	w.u8(flags)
	w.count(len(o.ExtractedClaims))
	for _, c := range o.ExtractedClaims {
		w.str(c.Title)
		w.str(c.Statement)
		w.str(c.Category)
	}
	w.count(len(o.Judgements))
	for i := range o.Judgements {
		j := &o.Judgements[i]
		w.str(j.ClaimID)
		w.str(j.Stance)
		w.f64(j.Confidence)
		w.str(j.Rationale)
		w.optStr(j.RevisedStatement)
		w.optStr(j.MergesWith)
	}
	w.count(len(o.ClaimVotes))
	for _, v := range o.ClaimVotes {
		w.str(v.ClaimID)
		w.str(v.Vote)
		w.optStr(v.Reason)
	}
	if o.SelfScore != nil {
		w.f64(*o.SelfScore)
	}
	w.ivar(o.respondedAtMs)
}

func encodeCur(w *wbuf, c *roundState) {
	w.boolean(c != nil)
	if c == nil {
		return
	}
	w.str(string(c.phase))
	w.num(c.round)
	w.ivar(c.startedAt)
	w.ivar(c.timerDue)
	w.num(c.timedOut)
	w.num(c.failed)
	w.count(len(c.tasks))
	for i := range c.tasks {
		t := &c.tasks[i]
		w.str(t.id)
		w.str(t.pid)
		w.ivar(t.due)
		w.u8(uint8(t.status))
		w.boolean(t.output != nil)
		if t.output != nil {
			encodeOutput(w, t.output)
		}
	}
}

func encodePending(w *wbuf, t *pendingTask) {
	w.boolean(t != nil)
	if t != nil {
		w.str(t.id)
		w.str(t.pid)
		w.ivar(t.due)
	}
}

func encodeReport(w *wbuf, r *FinalReport) {
	w.str(r.Mode)
	w.boolean(r.TraceIncluded)
	w.str(r.TraceLevel)
	w.str(r.FinalSummary)
	w.str(r.RepresentativeSpeech)
	w.boolean(r.hasTimeline || r.OpinionShiftTimeline != nil)
	w.count(len(r.OpinionShiftTimeline))
	for _, x := range r.OpinionShiftTimeline {
		w.str(x.ClaimID)
		w.str(x.ParticipantID)
		w.str(x.From)
		w.str(x.To)
		w.num(x.Round)
		w.optStr(x.Reason)
	}
	w.boolean(r.hasHighlights || r.RoundHighlights != nil)
	w.count(len(r.RoundHighlights))
	for _, x := range r.RoundHighlights {
		w.num(x.Round)
		w.str(x.ParticipantID)
		w.str(x.Summary)
	}
}

// DecodeState restores a state written by EncodeState of any supported
// version. It validates structure and references so that a decoded state
// can never make Apply panic; it returns ErrCorruptState or
// ErrUnsupportedVersion (wrapped) on failure.
func DecodeState(b []byte) (*State, error) {
	if len(b) < len(stateMagic) || string(b[:len(stateMagic)]) != stateMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptState)
	}
	r := &rbuf{b: b, off: len(stateMagic)}
	v := r.uvar()
	if r.bad {
		return nil, fmt.Errorf("%w: bad version", ErrCorruptState)
	}
	switch v {
	case 1:
		return decodeV1(r)
	}
	return nil, fmt.Errorf("%w: %d (this binary reads up to %d)", ErrUnsupportedVersion, v, StateVersion)
}
