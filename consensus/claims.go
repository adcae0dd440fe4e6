package consensus

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// applyClaimUpdate applies spec §10 for an initial or debate round: claim
// creation (or seeding), then revisions and merges, in dispatch order. It
// returns the number of new claims and the round's applied-merge log.
func (s *State) applyClaimUpdate(outputs []*Output, round int) (int, []AppliedMerge) {
	newClaims := 0
	rs := strconv.Itoa(round)
	ids, count := s.newClaimIDs(outputs, rs)
	s.catalog = slices.Grow(s.catalog, count)
	// The initial round creates most claims: size the index once instead
	// of letting it grow by doubling.
	s.index.reserve(s.catalog, len(s.catalog)+count)
	// Claims of one output share one proposedBy slice, a one-entry window
	// of one block: proposedBy is never edited in place (a merge gives the
	// survivor a fresh slice), and the window's capacity ends at its length.
	var owners []string
	if count > 0 {
		owners = make([]string, len(outputs))
	}
	for oi, o := range outputs {
		var by []string
		if len(o.ExtractedClaims) > 0 {
			owners[oi] = o.ParticipantID
			by = owners[oi : oi+1 : oi+1]
		}
		for seq, ec := range o.ExtractedClaims {
			// ids holds "<pid>:<round>:<seq>" for every new claim, in order.
			n := len(o.ParticipantID) + 1 + len(rs) + 1 + decimalLen(seq)
			id := s.freeID(ids[:n])
			ids = ids[n:]
			s.appendClaim(&Claim{ClaimID: id, Title: ec.Title, Statement: ec.Statement, Category: ec.Category,
				ProposedBy: by, Status: ClaimActive})
			newClaims++
		}
	}
	if len(s.catalog) == 0 {
		for _, o := range outputs {
			id := s.freeID("seed:" + o.ParticipantID + ":" + rs)
			s.appendClaim(&Claim{ClaimID: id, Title: "Seed from " + o.ParticipantID, Statement: o.Summary,
				Category: "todo", ProposedBy: []string{o.ParticipantID}, Status: ClaimActive})
			newClaims++
		}
	}
	merges := make([]AppliedMerge, 0)
	for _, o := range outputs {
		for i := range o.Judgements {
			merges = s.applyJudgement(&o.Judgements[i], o.ParticipantID, merges)
		}
	}
	slices.SortStableFunc(merges, func(a, b AppliedMerge) int {
		pa, _ := s.claimPos(a.SourceClaimID)
		pb, _ := s.claimPos(b.SourceClaimID)
		return cmp.Compare(pa, pb)
	})
	for i := range merges {
		sort.Strings(merges[i].ParticipantIDs)
	}
	return newClaims, merges
}

// newClaimIDs returns the candidate ids of every extracted claim of the
// round concatenated in one string (one allocation for all of them), and
// the number of those claims.
func (s *State) newClaimIDs(outputs []*Output, rs string) (string, int) {
	n, size := 0, 0
	for _, o := range outputs {
		for seq := range o.ExtractedClaims {
			n++
			size += len(o.ParticipantID) + 1 + len(rs) + 1 + decimalLen(seq)
		}
	}
	if n == 0 {
		return "", 0
	}
	// A Builder hands its buffer over as the string: no second copy.
	var b strings.Builder
	b.Grow(size)
	var num [20]byte
	for _, o := range outputs {
		for seq := range o.ExtractedClaims {
			b.WriteString(o.ParticipantID)
			b.WriteByte(':')
			b.WriteString(rs)
			b.WriteByte(':')
			b.Write(strconv.AppendInt(num[:0], int64(seq), 10))
		}
	}
	return b.String(), n
}

// decimalLen is len(strconv.Itoa(n)) for n >= 0.
func decimalLen(n int) int {
	l := 1
	for ; n >= 10; n /= 10 {
		l++
	}
	return l
}

// freeID returns id, or id with a "#n" suffix when a claim already uses it.
// argue would overwrite the older claim; keeping both is the safer choice
// (ids like "seed:1:0" and participant "seed"'s "seed:1:0" can collide).
func (s *State) freeID(id string) string {
	if _, taken := s.claimPos(id); !taken {
		return id
	}
	for n := 2; ; n++ {
		c := id + "#" + strconv.Itoa(n)
		if _, taken := s.claimPos(c); !taken {
			return c
		}
	}
}

func (s *State) appendClaim(c *Claim) {
	// Field by field into the slot: appending the value copies it with a
	// bulk barrier while the collector marks, which costs more.
	n := len(s.catalog)
	if n == cap(s.catalog) {
		s.catalog = slices.Grow(s.catalog, 1)
	}
	s.catalog = s.catalog[:n+1]
	p := &s.catalog[n]
	p.ClaimID, p.Title, p.Statement, p.Category = c.ClaimID, c.Title, c.Statement, c.Category
	p.ProposedBy, p.Status, p.MergedInto = c.ProposedBy, c.Status, c.MergedInto
	s.index.add(s.catalog, n)
	s.catalogChanged()
}

// catalogChanged drops the task catalogs cached by taskCatalog. Every
// change to s.catalog goes through appendClaim or applyJudgement, and both
// call it.
func (s *State) catalogChanged() {
	// Tested first: clearing slice headers is a barriered store while the
	// collector marks, and the initial round adds claims one by one.
	if s.taskCatalogs[0] != nil || s.taskCatalogs[1] != nil {
		s.taskCatalogs = [2][]Claim{}
	}
}

// sharedCatalog returns the catalog itself, capped at its length, for a
// task or result to hold instead of a copy. Appending to the catalog never
// reaches such a slice (its capacity ends at its length); an edit in place
// copies the catalog first (editCatalog).
func (s *State) sharedCatalog() []Claim {
	if len(s.catalog) == 0 {
		return []Claim{} // encodes as [], as the copy it replaces did
	}
	s.catalogShared = true
	return s.catalog[:len(s.catalog):len(s.catalog)]
}

// editCatalog must precede every in-place edit of a catalog entry: while
// a slice from sharedCatalog may be held elsewhere, the state moves to a
// private copy first.
func (s *State) editCatalog() {
	if s.catalogShared {
		s.catalog = slices.Clone(s.catalog)
		s.catalogShared = false
	}
}

// root follows mergedInto links to the canonical claim. It returns the
// position of the root, or -1 for an id not in the catalog. The walk is
// bounded because merges always point at an earlier-created survivor.
func (s *State) root(id string) int {
	i, ok := s.claimPos(id)
	if !ok {
		return -1
	}
	return s.rootAt(i)
}

// rootAt is root for the claim at catalog position i.
func (s *State) rootAt(i int) int {
	for steps := 0; steps <= len(s.catalog); steps++ {
		c := &s.catalog[i]
		if c.Status != ClaimMerged || c.MergedInto == "" {
			return i
		}
		j, ok := s.claimPos(c.MergedInto)
		if !ok {
			return i
		}
		i = j
	}
	return i
}

// applyJudgement applies one judgement's revision and merge (§10.2).
func (s *State) applyJudgement(j *Judgement, pid string, merges []AppliedMerge) []AppliedMerge {
	direct, ok := s.claimPos(j.ClaimID)
	if !ok {
		return merges
	}
	if j.RevisedStatement != nil && (j.Stance == StanceRevise || j.Stance == StanceDisagree) {
		s.editCatalog()
		s.catalog[direct].Statement = *j.RevisedStatement
		s.catalogChanged()
	}
	if j.MergesWith == nil {
		return merges
	}
	a, b := s.root(j.ClaimID), s.root(*j.MergesWith)
	if b < 0 {
		return merges
	}
	if a == b {
		// A second participant asking for a merge already applied this round
		// joins that entry; a merge from an earlier round is not replayed.
		for k := range merges {
			m := &merges[k]
			if m.TargetClaimID == s.catalog[a].ClaimID && (m.SourceClaimID == j.ClaimID || m.SourceClaimID == *j.MergesWith) {
				m.ParticipantIDs = addUnique(m.ParticipantIDs, pid)
			}
		}
		return merges
	}
	survivor, loser := a, b
	if b < a {
		survivor, loser = b, a
	}
	sid, lid := s.catalog[survivor].ClaimID, s.catalog[loser].ClaimID
	s.editCatalog()
	s.catalogChanged()
	s.catalog[loser].Status = ClaimMerged
	s.catalog[loser].MergedInto = sid
	owners := make([]string, 0, len(s.catalog[survivor].ProposedBy)+len(s.catalog[loser].ProposedBy))
	owners = append(owners, s.catalog[survivor].ProposedBy...)
	for _, p := range s.catalog[loser].ProposedBy {
		owners = addUnique(owners, p)
	}
	s.catalog[survivor].ProposedBy = owners // a fresh slice: task snapshots may share the old one
	for k := range s.catalog {
		if s.catalog[k].Status == ClaimMerged && s.catalog[k].MergedInto == lid {
			s.catalog[k].MergedInto = sid
		}
	}
	// A loser stops being a root, so it can lose only once: one entry each.
	return append(merges, AppliedMerge{SourceClaimID: lid, TargetClaimID: sid, ParticipantIDs: []string{pid}})
}

func addUnique(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}
