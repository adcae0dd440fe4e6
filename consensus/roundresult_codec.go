package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// The binary form of a RoundResult, carried in Raft log entries instead of
// the agent's raw JSON. It reuses the state encoding's primitives (wbuf,
// rbuf: uvarints, length-prefixed strings, presence bytes, IEEE-754 bits)
// and adds two things for size: enum-like values (stance, vote, category)
// are one byte, and the claim ids of a judgement or vote list are
// front-coded against the previous id of the same list (agents vote in
// catalog order, so "p3:0:117" after "p3:0:116" costs 3 bytes).
//
// Layout, version 1:
//
//	uvarint version
//	u8 flags (rrFatal, rrHasVotes, rrHasClaims, rrSelfScore, rrOutput)
//	rrFatal: str fatal, and nothing else
//	u8 decl; str declPID, str declPhase, f64 declRound as decl says
//	str fieldErr, titleErr, votesErr, listErr
//	rrOutput: uvarint total bytes of the strings below, str fullResponse,
//	  str summary, str taskTitle, [f64 selfScore],
//	  [count claims: str title, str statement, u8 category],
//	  count judgements: id, u8 stance, f64 confidence, str rationale,
//	    optStr revisedStatement, optStr mergesWith,
//	  count votes: id, u8 vote, optStr reason
//	where id is uvarint shared-prefix length + str suffix.
//
// A new layout must bump roundResultVersion and keep decoding version 1:
// entries already in a log are applied again after every restart.

// roundResultVersion is the current version of the binary form.
const roundResultVersion = 1

// Flags of the binary form (persisted: never renumber).
const (
	rrFatal uint8 = 1 << iota
	rrHasVotes
	rrHasClaims
	rrSelfScore
	rrOutput
)

// ErrCorruptRoundResult is returned by DecodeRoundResult for bytes that are
// not a RoundResult's binary form.
var ErrCorruptRoundResult = errors.New("consensus: corrupt round result")

// MarshalBinary returns the compact binary form of r (never fails).
func (r *RoundResult) MarshalBinary() ([]byte, error) {
	n := 16 + len(r.fatal) + len(r.declPID) + len(r.declPhase) + len(r.fieldErr) + len(r.titleErr) +
		len(r.votesErr) + len(r.listErr)
	if r.usable() {
		o := &r.out
		n += textBytes(o) + 3*len(o.ExtractedClaims) + 16*len(o.Judgements) + 4*len(o.ClaimVotes)
	}
	return r.AppendBinary(make([]byte, 0, n))
}

// AppendBinary appends the binary form of r to b.
func (r *RoundResult) AppendBinary(b []byte) ([]byte, error) {
	w := &wbuf{b: b}
	w.uvar(roundResultVersion)
	flags := r.flags()
	w.u8(flags)
	if flags&rrFatal != 0 {
		w.str(r.fatal)
		return w.b, nil
	}
	w.u8(r.decl)
	if r.decl&declPID != 0 {
		w.str(r.declPID)
	}
	if r.decl&declPhase != 0 {
		w.str(r.declPhase)
	}
	if r.decl&declRound != 0 {
		w.f64(r.declRound)
	}
	w.str(r.fieldErr)
	w.str(r.titleErr)
	w.str(r.votesErr)
	w.str(r.listErr)
	if flags&rrOutput != 0 {
		encodeResultOutput(w, &r.out)
	}
	return w.b, nil
}

func (r *RoundResult) flags() uint8 {
	if r.fatal != "" {
		return rrFatal
	}
	var f uint8
	if r.hasVotes {
		f |= rrHasVotes
	}
	if r.usable() {
		f |= rrOutput
		if r.out.hasClaims {
			f |= rrHasClaims
		}
		if r.out.SelfScore != nil {
			f |= rrSelfScore
		}
	}
	return f
}

// textBytes is the size of every string encodeResultOutput writes.
func textBytes(o *Output) int {
	n := len(o.FullResponse) + len(o.Summary) + len(o.TaskTitle)
	for _, c := range o.ExtractedClaims {
		n += len(c.Title) + len(c.Statement)
	}
	for i := range o.Judgements {
		j := &o.Judgements[i]
		n += len(j.ClaimID) + len(j.Rationale) + ptrLen(j.RevisedStatement) + ptrLen(j.MergesWith)
	}
	for _, v := range o.ClaimVotes {
		n += len(v.ClaimID) + ptrLen(v.Reason)
	}
	return n
}

func ptrLen(p *string) int {
	if p == nil {
		return 0
	}
	return len(*p)
}

func encodeResultOutput(w *wbuf, o *Output) {
	w.count(textBytes(o))
	w.str(o.FullResponse)
	w.str(o.Summary)
	w.str(o.TaskTitle)
	if o.SelfScore != nil {
		w.f64(*o.SelfScore)
	}
	if o.hasClaims {
		w.count(len(o.ExtractedClaims))
		for _, c := range o.ExtractedClaims {
			w.str(c.Title)
			w.str(c.Statement)
			w.u8(textCode(categoryText[:], c.Category))
		}
	}
	w.count(len(o.Judgements))
	prev := ""
	for i := range o.Judgements {
		j := &o.Judgements[i]
		prev = w.frontCoded(prev, j.ClaimID)
		w.u8(textCode(stanceText[:], j.Stance))
		w.f64(j.Confidence)
		w.str(j.Rationale)
		w.optStr(j.RevisedStatement)
		w.optStr(j.MergesWith)
	}
	w.count(len(o.ClaimVotes))
	prev = ""
	for _, v := range o.ClaimVotes {
		prev = w.frontCoded(prev, v.ClaimID)
		w.u8(textCode(voteText[:], v.Vote))
		w.optStr(v.Reason)
	}
}

// frontCoded writes id as its shared prefix with prev plus the rest, and
// returns id (the next prev).
func (w *wbuf) frontCoded(prev, id string) string {
	k := 0
	for k < len(prev) && k < len(id) && prev[k] == id[k] {
		k++
	}
	w.uvar(uint64(k))
	w.str(id[k:])
	return id
}

// textCode is the index of s in names (0 is "" or unknown).
func textCode(names []string, s string) uint8 {
	for i, n := range names {
		if n == s {
			return uint8(i)
		}
	}
	return 0
}

// DecodeRoundResult decodes MarshalBinary's form. The bytes come from the
// Raft log, so they are checked like outside input: every length is bounded
// by the bytes left, codes and limits are those ParseRoundResult
// guarantees (an output only where some task could accept it, required
// strings non-empty, valid UTF-8, list and size limits), and anything else
// is ErrCorruptRoundResult, never a panic.
func DecodeRoundResult(b []byte) (*RoundResult, error) {
	r := &rbuf{b: b}
	if v := r.uvar(); r.bad || v != roundResultVersion {
		return nil, fmt.Errorf("%w: unknown version", ErrCorruptRoundResult)
	}
	rr := &RoundResult{}
	flags := r.u8()
	if flags&rrFatal != 0 {
		rr.fatal = r.str()
		if flags != rrFatal || rr.fatal == "" || r.bad || r.off != len(b) {
			return nil, ErrCorruptRoundResult
		}
		return rr, nil
	}
	rr.decl = r.u8()
	if rr.decl&declPID != 0 {
		rr.declPID = r.str()
	}
	if rr.decl&declPhase != 0 {
		rr.declPhase = r.str()
	}
	finite := true // a JSON number is never NaN or infinite
	if rr.decl&declRound != 0 {
		rr.declRound = r.f64()
		finite = !math.IsNaN(rr.declRound) && !math.IsInf(rr.declRound, 0)
	}
	rr.fieldErr, rr.titleErr, rr.votesErr, rr.listErr = r.str(), r.str(), r.str(), r.str()
	rr.hasVotes = flags&rrHasVotes != 0
	// Error texts and the declared binding are only compared and quoted,
	// as the raw path does: their bytes are not checked.
	ok := flags&^(rrHasVotes|rrHasClaims|rrSelfScore|rrOutput) == 0 && rr.decl&^(declPID|declPhase|declRound) == 0 && finite
	if flags&rrOutput != 0 {
		ok = ok && decodeResultOutput(r, rr, flags)
	} else {
		ok = ok && flags&(rrHasClaims|rrSelfScore) == 0
	}
	if !ok || r.bad || r.off != len(b) || rr.usable() != (flags&rrOutput != 0) {
		return nil, ErrCorruptRoundResult
	}
	return rr, nil
}

// resultReader decodes the strings of one output into a single block.
type resultReader struct {
	*rbuf
	arena strings.Builder
	ok    bool
}

// text reads a string of at most max bytes (at least min) into the arena.
func (r *resultReader) text(min, max int) string {
	p := r.raw()
	if len(p) < min || len(p) > max || !utf8.Valid(p) {
		r.ok = false
		return ""
	}
	off := r.arena.Len()
	r.arena.Write(p)
	return r.arena.String()[off:]
}

// optText reads an optional string into block, which the caller sized
// for every optional string of its list (one allocation for all of them).
func (r *resultReader) optText(max int, block *[]string, size int) *string {
	if !r.boolean() {
		return nil
	}
	if *block == nil {
		*block = make([]string, 0, size)
	}
	if len(*block) == cap(*block) {
		r.ok = false
		return nil
	}
	*block = append(*block, r.text(0, max))
	return &(*block)[len(*block)-1]
}

// id reads a front-coded claim id (1..MaxIDBytes bytes) following prev.
func (r *resultReader) id(prev string) string {
	k := r.uvar()
	p := r.raw()
	n := int(k) + len(p)
	if k > uint64(len(prev)) || n == 0 || n > MaxIDBytes {
		r.ok = false
		return ""
	}
	off := r.arena.Len()
	r.arena.WriteString(prev[:k])
	r.arena.Write(p)
	s := r.arena.String()[off:]
	if !utf8.ValidString(s) { // the cut may split a character the suffix completes
		r.ok = false
	}
	return s
}

// code reads a one-byte code that must index names (1..len(names)-1).
func (r *resultReader) code(names []string) string {
	c := r.u8()
	if c == 0 || int(c) >= len(names) {
		r.ok = false
		return ""
	}
	return names[c]
}

// list reads a list length within MaxListLen.
func (r *resultReader) list() int {
	n := r.count()
	if n > MaxListLen {
		r.ok = false
		return 0
	}
	return n
}

func decodeResultOutput(rb *rbuf, rr *RoundResult, flags uint8) bool {
	r := &resultReader{rbuf: rb, ok: true}
	// The size is a hint for the arena: front coding lets it exceed the
	// bytes left, so it is only trusted up to a bound, and a wrong hint
	// costs a reallocation, never a wrong string.
	total := r.uvar()
	r.arena.Grow(int(min(total, uint64(8*len(rb.b)), 2*MaxOutputBytes)))
	o := &rr.out
	o.FullResponse = r.text(1, MaxTextBytes)
	o.Summary = r.text(1, MaxTextBytes)
	o.TaskTitle = r.text(0, MaxTextBytes)
	if flags&rrSelfScore != 0 {
		rr.selfScore = r.f64()
		o.SelfScore = &rr.selfScore
		r.ok = r.ok && rr.selfScore >= 0 && rr.selfScore <= 100
	}
	if flags&rrHasClaims != 0 {
		o.hasClaims = true
		o.ExtractedClaims = make([]ExtractedClaim, r.list())
		for i := range o.ExtractedClaims {
			c := &o.ExtractedClaims[i]
			c.Title, c.Statement = r.text(1, MaxTextBytes), r.text(1, MaxTextBytes)
			if k := r.u8(); int(k) < len(categoryText) {
				c.Category = categoryText[k]
			} else {
				r.ok = false
			}
		}
	}
	o.Judgements = make([]Judgement, r.list())
	var opt []string
	prev := ""
	for i := range o.Judgements {
		j := &o.Judgements[i]
		j.ClaimID = r.id(prev)
		prev = j.ClaimID
		j.Stance = r.code(stanceText[:])
		j.Confidence = r.f64()
		j.Rationale = r.text(1, MaxTextBytes)
		j.RevisedStatement = r.optText(MaxTextBytes, &opt, 2*len(o.Judgements))
		j.MergesWith = r.optText(MaxIDBytes, &opt, 2*len(o.Judgements))
		r.ok = r.ok && j.Confidence >= 0 && j.Confidence <= 1 &&
			(j.RevisedStatement == nil || *j.RevisedStatement != "") && (j.MergesWith == nil || *j.MergesWith != "")
	}
	if n := r.list(); n > 0 {
		o.ClaimVotes = make([]VoteInput, n)
		opt, prev = nil, ""
		for i := range o.ClaimVotes {
			v := &o.ClaimVotes[i]
			v.ClaimID = r.id(prev)
			prev = v.ClaimID
			v.Vote = r.code(voteText[:])
			v.Reason = r.optText(MaxTextBytes, &opt, n)
		}
	}
	// Votes are kept exactly when they were present (and then valid), the
	// title only when it is one an initial round accepts.
	r.ok = r.ok && rr.hasVotes == (len(o.ClaimVotes) > 0) && (o.TaskTitle == "") == (rr.titleErr != "") &&
		utf16Len(o.TaskTitle) <= MaxTaskTitle
	return r.ok && !r.bad
}

// MarshalJSON renders the binary form as a base64 string, so an Input
// holding a RoundResult survives a JSON round trip (LocalRun.Inputs).
func (r *RoundResult) MarshalJSON() ([]byte, error) {
	b, _ := r.MarshalBinary()
	return json.Marshal(b)
}

// UnmarshalJSON is the inverse of MarshalJSON.
func (r *RoundResult) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return err
	}
	dec, err := DecodeRoundResult(b)
	if err != nil {
		return err
	}
	*r = *dec
	if r.out.SelfScore != nil {
		r.out.SelfScore = &r.selfScore
	}
	return nil
}
