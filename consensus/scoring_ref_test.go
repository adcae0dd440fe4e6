package consensus

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The implementations of resolutions and correctness that the allocation-
// light ones replaced, kept verbatim (renamed) as references.

func (s *State) refResolutions() []ClaimResolution {
	out := make([]ClaimResolution, 0, len(s.catalog))
	pos := make(map[string]int, len(s.catalog)) // active claimId -> index in out
	for i := range s.catalog {
		if s.catalog[i].Status == ClaimActive {
			pos[s.catalog[i].ClaimID] = len(out)
			out = append(out, ClaimResolution{ClaimID: s.catalog[i].ClaimID, Votes: []Vote{}})
		}
	}
	for _, o := range s.finalVoteOutputs() {
		for _, v := range o.ClaimVotes {
			k, ok := pos[v.ClaimID]
			if !ok {
				continue
			}
			r := &out[k]
			vote := Vote{ParticipantID: o.ParticipantID, ClaimID: v.ClaimID, Vote: v.Vote, Reason: v.Reason}
			replaced := false
			for x := range r.Votes {
				if r.Votes[x].ParticipantID == o.ParticipantID {
					r.Votes[x] = vote // a later duplicate replaces the earlier one in place
					replaced = true
				}
			}
			if !replaced {
				r.Votes = append(r.Votes, vote)
			}
		}
	}
	threshold := s.req.ConsensusPolicy.Threshold
	for k := range out {
		r := &out[k]
		for _, v := range r.Votes {
			if v.Vote == VoteAccept {
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

func (s *State) refCorrectness() []float64 {
	n := len(s.req.Participants)
	total := make([]int, n)
	agree := make([]int, n)
	owners := s.refRootOwners()
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			for _, j := range o.Judgements {
				r := s.root(j.ClaimID)
				if r < 0 {
					continue
				}
				for _, w := range owners[r] {
					if s.req.Participants[w].ID == o.ParticipantID {
						continue
					}
					total[w]++
					if j.Stance == StanceAgree {
						agree[w]++
					}
				}
			}
		}
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = 50
		if total[i] > 0 {
			out[i] = round2(float64(agree[i]) / float64(total[i]) * 100)
		}
	}
	return out
}

func (s *State) refRootOwners() map[int][]int {
	owners := make(map[int][]int, len(s.catalog))
	for i := range s.catalog {
		r := s.root(s.catalog[i].ClaimID)
		for _, p := range s.catalog[i].ProposedBy {
			pi := s.req.participantIndex(p)
			if pi < 0 {
				continue
			}
			dup := false
			for _, x := range owners[r] {
				dup = dup || x == pi
			}
			if !dup {
				owners[r] = append(owners[r], pi)
			}
		}
	}
	return owners
}

// drawTallyState draws a catalog with merges, judgements naming known and
// unknown claims, and a final vote with duplicate votes, unknown and
// merged claim ids and, sometimes, two outputs of one participant (only a
// corrupt snapshot could hold that, but the tally must not depend on it).
func drawTallyState(t *rapid.T) *State {
	np := rapid.IntRange(1, 70).Draw(t, "participants")
	pids := make([]string, np)
	req := &Request{ConsensusPolicy: ConsensusPolicy{Threshold: rapid.SampledFrom([]float64{0, 0.5, 0.6, 1}).Draw(t, "threshold")}}
	for i := range pids {
		pids[i] = fmt.Sprintf("p%d", i)
		req.Participants = append(req.Participants, Participant{ID: pids[i]})
	}
	s := &State{req: req, deadlineHit: rapid.Bool().Draw(t, "deadlineHit")}
	nc := rapid.IntRange(0, 40).Draw(t, "claims")
	for i := 0; i < nc; i++ {
		c := Claim{ClaimID: fmt.Sprintf("c%d", i), Status: ClaimActive}
		for k := rapid.IntRange(0, 3).Draw(t, "owners"); k > 0; k-- {
			c.ProposedBy = append(c.ProposedBy, rapid.SampledFrom(append(pids, "ghost")).Draw(t, "owner"))
		}
		if i > 0 && rapid.IntRange(0, 3).Draw(t, "merged") == 0 {
			c.Status, c.MergedInto = ClaimMerged, fmt.Sprintf("c%d", rapid.IntRange(0, i-1).Draw(t, "into"))
		}
		s.catalog = append(s.catalog, c)
	}
	s.rebuildIndex()
	ids := []string{"unknown"}
	for i := 0; i < nc; i++ {
		ids = append(ids, fmt.Sprintf("c%d", i))
	}
	pickID := func() string { return rapid.SampledFrom(ids).Draw(t, "id") }
	phases := []Phase{PhaseInitial, PhaseDebate, PhaseFinalVote}
	for ri, nr := 0, rapid.IntRange(1, 4).Draw(t, "rounds"); ri < nr; ri++ {
		rec := RoundRecord{Round: ri, phase: phases[min(ri, 1)]}
		if ri == nr-1 && rapid.Bool().Draw(t, "final") {
			rec.phase = phases[2]
		}
		for oi, no := 0, rapid.IntRange(0, np).Draw(t, "outputs"); oi < no; oi++ {
			pid := pids[oi]
			if rapid.IntRange(0, 9).Draw(t, "repeat") == 0 {
				pid = rapid.SampledFrom(pids).Draw(t, "pid")
			}
			o := &Output{ParticipantID: pid, Phase: rec.phase, Round: ri}
			for k := rapid.IntRange(0, 8).Draw(t, "judgements"); k > 0; k-- {
				o.Judgements = append(o.Judgements, Judgement{ClaimID: pickID(),
					Stance: rapid.SampledFrom([]string{StanceAgree, StanceDisagree, StanceRevise}).Draw(t, "stance")})
			}
			if rec.phase == PhaseFinalVote {
				for k := rapid.IntRange(1, 2*nc+1).Draw(t, "votes"); k > 0; k-- {
					var reason *string // absent or present, so a replaced vote can drop its reason
					if rapid.Bool().Draw(t, "reason") {
						r := fmt.Sprint(k)
						reason = &r
					}
					o.ClaimVotes = append(o.ClaimVotes, VoteInput{ClaimID: pickID(),
						Vote: rapid.SampledFrom([]string{VoteAccept, VoteReject}).Draw(t, "vote"), Reason: reason})
				}
			}
			rec.Outputs = append(rec.Outputs, o)
		}
		s.rounds = append(s.rounds, rec)
	}
	return s
}

func TestProperty_TallyMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawTallyState(t)
		if got, want := s.resolutions(), s.refResolutions(); !reflect.DeepEqual(got, want) {
			t.Fatalf("resolutions differ:\n%+v\n%+v", got, want)
		}
		sc := getScratch()
		pis := s.outputParticipants(make([]int32, s.outputCount()))
		got, want := s.correctness(sc, pis), s.refCorrectness()
		sc.release()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("correctness differs:\n%v\n%v", got, want)
		}
	})
}

func TestTrimmedLenCap(t *testing.T) {
	for _, s := range []string{"", "  ", " abc ", "\u3000x\u3000", "😀😀😀", "é" + long("x", 300), " " + long("😀", 200) + "\u2028"} {
		for _, limit := range []int{0, 1, 2, 3, 5, 80, 180, 1000} {
			if got, want := trimmedLenCap(s, limit), min(trimmedLen(s), limit); got != want {
				t.Errorf("trimmedLenCap(%q, %d) = %d, want %d", s, limit, got, want)
			}
		}
	}
}

func TestIsoTime_MatchesFormat(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ms := rapid.Int64Range(-62135596800000, 253402300799999).Draw(rt, "ms")
		if got, want := isoTime(ms), time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z"); got != want {
			rt.Fatalf("isoTime(%d) = %q, want %q", ms, got, want)
		}
	})
	for _, ms := range []int64{0, 1, 999, 1_750_000_000_123, -1, -62135596800000, 253402300799999, 253402300800000,
		-62135596800001, 1 << 50, -(1 << 50)} {
		want := time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
		if got := isoTime(ms); got != want {
			t.Errorf("isoTime(%d) = %q, want %q", ms, got, want)
		}
	}
}
