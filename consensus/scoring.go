package consensus

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"
)

// scoreOf returns the per-output dimension values (spec §13).
type outputScore struct {
	round                                                 int
	score, correctness, completeness, actionability, cons float64
}

// scoreboard computes spec §13 for every participant in request order, then
// sorts by total descending and participantId ascending (byte order).
func (s *State) scoreboard() []ParticipantScore {
	sc := getScratch()
	defer sc.release()
	outputs := s.outputCount()
	tmp := sc.int32s(outputs + len(s.req.Participants))
	pis, counts := s.outputParticipants(tmp[:outputs]), tmp[outputs:]
	correctness := s.correctness(sc, pis)
	w := s.req.ScoringPolicy.Rubric
	if w.Correctness == 0 && w.Completeness == 0 && w.Actionability == 0 && w.Consistency == 0 {
		w = DefaultRubric()
	}
	wsum := w.Correctness + w.Completeness + w.Actionability + w.Consistency
	// Every participant's scores get a window of one block, sized by a
	// counting pass.
	n := 0
	for _, pi := range pis {
		if pi >= 0 {
			counts[pi]++
			n++
		}
	}
	per := make([][]outputScore, len(s.req.Participants))
	block := make([]outputScore, n)
	for pi := range per {
		c := int(counts[pi])
		per[pi], block = block[:0:c], block[c:]
	}
	for ri := range s.rounds {
		rec := &s.rounds[ri]
		t := roundT(rec.Outputs)
		for _, o := range rec.Outputs {
			pi := pis[0]
			pis = pis[1:]
			if pi < 0 {
				continue
			}
			os := scoreOutput(o, t)
			os.correctness = correctness[pi]
			os.score = round2((w.Correctness*os.correctness + w.Completeness*os.completeness +
				w.Actionability*os.actionability + w.Consistency*os.cons) / wsum)
			per[pi] = append(per[pi], os)
		}
	}
	board := make([]ParticipantScore, len(s.req.Participants))
	for pi, p := range s.req.Participants {
		board[pi] = participantScore(p.ID, per[pi])
	}
	slices.SortStableFunc(board, func(a, b ParticipantScore) int {
		if a.Total != b.Total {
			if a.Total > b.Total {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ParticipantID, b.ParticipantID)
	})
	return board
}

func participantScore(id string, outs []outputScore) ParticipantScore {
	slices.SortStableFunc(outs, func(a, b outputScore) int { return cmp.Compare(a.round, b.round) })
	ps := ParticipantScore{ParticipantID: id, ByRound: make([]RoundScore, len(outs))}
	if len(outs) == 0 {
		return ps
	}
	var sum, c, m, a, k float64
	for i, o := range outs {
		ps.ByRound[i] = RoundScore{Round: o.round, Score: o.score}
		sum += o.score
		c += o.correctness
		m += o.completeness
		a += o.actionability
		k += o.cons
	}
	n := float64(len(outs))
	ps.Total = round2(sum / n)
	ps.Breakdown = &Breakdown{Correctness: round2(c / n), Completeness: round2(m / n),
		Actionability: round2(a / n), Consistency: round2(k / n)}
	return ps
}

// roundT is T(R) = max(1, max over outputs of max(#judgements, #claims, 1)).
func roundT(outputs []*Output) int {
	t := 1
	for _, o := range outputs {
		if len(o.Judgements) > t {
			t = len(o.Judgements)
		}
		if len(o.ExtractedClaims) > t {
			t = len(o.ExtractedClaims)
		}
	}
	return t
}

func stanceFactor(stance string) float64 {
	switch stance {
	case StanceAgree:
		return 1
	case StanceRevise:
		return 0.8
	}
	return 0.6
}

// scoreOutput computes completeness, actionability and consistency of one
// output, in the operation order of §13 so float64 results match argue.
func scoreOutput(o *Output, t int) outputScore {
	stanceAvg := 0.7
	hasRevision := false
	if len(o.Judgements) > 0 {
		sum := 0.0
		for _, j := range o.Judgements {
			sum += stanceFactor(j.Stance)
			hasRevision = hasRevision || j.RevisedStatement != nil
		}
		stanceAvg = sum / float64(len(o.Judgements))
	}
	// Lengths saturate: full at 180 (÷160, ÷180), summary at 80 (÷80, ÷60).
	full := float64(trimmedLenCap(o.FullResponse, 180))
	summ := float64(trimmedLenCap(o.Summary, 80))
	rev, votes := 0.55, 0.7
	if hasRevision {
		rev = 1
	}
	if o.Phase == PhaseFinalVote && len(o.ClaimVotes) > 0 {
		votes = 1
	}
	return outputScore{
		round: o.Round,
		completeness: round2(100 * (0.5*clamp01(float64(len(o.Judgements))/float64(t)) +
			0.3*clamp01(full/160) + 0.2*clamp01(summ/80))),
		actionability: round2(100 * (0.45*clamp01(summ/60) + 0.25*clamp01(full/180) + 0.2*rev + 0.1*votes)),
		cons:          round2(clampRange(stanceAvg*100, 0, 100)),
	}
}

func clampRange(x, lo, hi float64) float64 {
	if x < lo {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

// outputCount is the number of recorded outputs over all rounds.
func (s *State) outputCount() int {
	n := 0
	for ri := range s.rounds {
		n += len(s.rounds[ri].Outputs)
	}
	return n
}

// outputParticipants fills pis with the participant index of every
// recorded output (-1 for none), rounds in order, and returns it.
func (s *State) outputParticipants(pis []int32) []int32 {
	k := 0
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			pis[k] = int32(s.req.participantIndex(o.ParticipantID))
			k++
		}
	}
	return pis
}

// correctness is the peer-review value per participant index (§13): every
// judgement on a claim owned by someone else counts for each other owner.
// pis is outputParticipants; sc lends the owner sets.
func (s *State) correctness(sc *scratch, pis []int32) []float64 {
	n := len(s.req.Participants)
	total := make([]int, n)
	agree := make([]int, n)
	owners := s.rootOwners(sc)
	for ri := range s.rounds {
		for _, o := range s.rounds[ri].Outputs {
			judge := int(pis[0])
			pis = pis[1:]
			for _, j := range o.Judgements {
				r := s.root(j.ClaimID)
				if r < 0 {
					continue
				}
				for wi, word := range owners.set(r) {
					for ; word != 0; word &= word - 1 {
						w := wi*64 + bits.TrailingZeros64(word)
						if w == judge {
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

// ownerSets holds, per catalog position, a bit set of participant indexes.
type ownerSets struct {
	words int // uint64 words per set
	bits  []uint64
}

// set returns the bit set of position r.
func (o ownerSets) set(r int) []uint64 { return o.bits[r*o.words : (r+1)*o.words] }

// rootOwners gives each root position the participant indexes that own it:
// the union of proposedBy over every claim with that root. Sets make the
// union free of duplicates and take one scratch block for the whole
// catalog (pooled: the sets die with correctness).
func (s *State) rootOwners(sc *scratch) ownerSets {
	o := ownerSets{words: (len(s.req.Participants) + 63) / 64}
	o.bits = sc.uint64s(len(s.catalog) * o.words)
	lastID, lastPI := "", -1 // claims come in runs of one proposer
	for i := range s.catalog {
		r := s.rootAt(i)
		for _, p := range s.catalog[i].ProposedBy {
			if p != lastID || lastPI < 0 {
				lastID, lastPI = p, s.req.participantIndex(p)
			}
			if pi := lastPI; pi >= 0 {
				o.bits[r*o.words+pi/64] |= 1 << (pi % 64)
			}
		}
	}
	return o
}
