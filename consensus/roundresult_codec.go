package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// The binary form of a RoundResult, carried in Raft log entries instead of
// the agent's raw JSON. It reuses the state encoding's primitives (wbuf,
// rbuf: uvarints, length-prefixed strings, presence bytes, IEEE-754 bits);
// enum-like values (stance, vote, category) are one byte. The output's
// strings are not interleaved with its structure: they come first, as one
// block, and the structure gives only their lengths, in a fixed order. The
// decoder turns the block into one string (one copy, one allocation) and
// every field is a substring of it; UTF-8 is checked once for the block,
// plus that every string starts on a character boundary.
//
// Layout, version 1:
//
//	uvarint version
//	u8 flags (rrFatal, rrHasVotes, rrHasClaims, rrSelfScore, rrOutput)
//	rrFatal: str fatal, and nothing else
//	u8 decl; str declPID, str declPhase, f64 declRound as decl says
//	str fieldErr, titleErr, votesErr, listErr
//	rrOutput: bytes text (every string below, concatenated in order), then
//	  len fullResponse, len summary, len taskTitle, [f64 selfScore],
//	  [count claims: len title, len statement, u8 category],
//	  count judgements: len claimId, u8 stance, f64 confidence,
//	    len rationale, optLen revisedStatement, optLen mergesWith,
//	  count votes: len claimId, u8 vote, optLen reason
//	where len is a uvarint and optLen a presence byte plus a len.
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
	each(o, func(s string) { w.b = append(w.b, s...) })
	w.count(len(o.FullResponse))
	w.count(len(o.Summary))
	w.count(len(o.TaskTitle))
	if o.SelfScore != nil {
		w.f64(*o.SelfScore)
	}
	if o.hasClaims {
		w.count(len(o.ExtractedClaims))
		for _, c := range o.ExtractedClaims {
			w.count(len(c.Title))
			w.count(len(c.Statement))
			w.u8(textCode(categoryText[:], c.Category))
		}
	}
	w.count(len(o.Judgements))
	for i := range o.Judgements {
		j := &o.Judgements[i]
		w.count(len(j.ClaimID))
		w.u8(textCode(stanceText[:], j.Stance))
		w.f64(j.Confidence)
		w.count(len(j.Rationale))
		w.optLen(j.RevisedStatement)
		w.optLen(j.MergesWith)
	}
	w.count(len(o.ClaimVotes))
	for _, v := range o.ClaimVotes {
		w.count(len(v.ClaimID))
		w.u8(textCode(voteText[:], v.Vote))
		w.optLen(v.Reason)
	}
}

// each calls fn with every string of o that the binary form carries, in
// the order of its text block.
func each(o *Output, fn func(string)) {
	fn(o.FullResponse)
	fn(o.Summary)
	fn(o.TaskTitle)
	for _, c := range o.ExtractedClaims {
		fn(c.Title)
		fn(c.Statement)
	}
	for i := range o.Judgements {
		j := &o.Judgements[i]
		fn(j.ClaimID)
		fn(j.Rationale)
		if j.RevisedStatement != nil {
			fn(*j.RevisedStatement)
		}
		if j.MergesWith != nil {
			fn(*j.MergesWith)
		}
	}
	for _, v := range o.ClaimVotes {
		fn(v.ClaimID)
		if v.Reason != nil {
			fn(*v.Reason)
		}
	}
}

// optLen writes a presence byte and the length of an optional string.
func (w *wbuf) optLen(p *string) {
	w.boolean(p != nil)
	if p != nil {
		w.count(len(*p))
	}
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

// resultReader decodes an output's structure; its strings are cut from
// text in order.
type resultReader struct {
	*rbuf
	text string
	pos  int // next string's offset in text
	ok   bool
}

// next returns the next string of the text block: n bytes (min <= n <=
// max) starting on a character boundary. The block is valid UTF-8 and
// the string after it starts on a boundary too (checked by the next call,
// or it is the block's end), so every string is valid UTF-8.
func (r *resultReader) next(min, max int) string {
	n := r.uvar()
	if n < uint64(min) || n > uint64(max) || n > uint64(len(r.text)-r.pos) ||
		r.pos < len(r.text) && !utf8.RuneStart(r.text[r.pos]) {
		r.ok = false
		r.pos = len(r.text)
		return ""
	}
	s := r.text[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s
}

// optNext reads an optional string into block, which the caller sized
// for every optional string of its list (one allocation for all of them).
func (r *resultReader) optNext(max int, block *[]string, size int) *string {
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
	*block = append(*block, r.next(0, max))
	return &(*block)[len(*block)-1]
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
	r.text = string(rb.raw())
	if !utf8.ValidString(r.text) {
		return false
	}
	o := &rr.out
	o.FullResponse = r.next(1, MaxTextBytes)
	o.Summary = r.next(1, MaxTextBytes)
	o.TaskTitle = r.next(0, MaxTextBytes)
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
			c.Title, c.Statement = r.next(1, MaxTextBytes), r.next(1, MaxTextBytes)
			if k := r.u8(); int(k) < len(categoryText) {
				c.Category = categoryText[k]
			} else {
				r.ok = false
			}
		}
	}
	o.Judgements = make([]Judgement, r.list())
	var opt []string
	for i := range o.Judgements {
		j := &o.Judgements[i]
		j.ClaimID = r.next(1, MaxIDBytes)
		j.Stance = r.code(stanceText[:])
		j.Confidence = r.f64()
		j.Rationale = r.next(1, MaxTextBytes)
		j.RevisedStatement = r.optNext(MaxTextBytes, &opt, 2*len(o.Judgements))
		j.MergesWith = r.optNext(MaxIDBytes, &opt, 2*len(o.Judgements))
		r.ok = r.ok && j.Confidence >= 0 && j.Confidence <= 1 &&
			(j.RevisedStatement == nil || *j.RevisedStatement != "") && (j.MergesWith == nil || *j.MergesWith != "")
	}
	if n := r.list(); n > 0 {
		o.ClaimVotes = make([]VoteInput, n)
		opt = nil
		for i := range o.ClaimVotes {
			v := &o.ClaimVotes[i]
			v.ClaimID = r.next(1, MaxIDBytes)
			v.Vote = r.code(voteText[:])
			v.Reason = r.optNext(MaxTextBytes, &opt, n)
		}
	}
	// Every string of the block is used; votes are kept exactly when they
	// were present (and then valid), the title only when it is one an
	// initial round accepts.
	r.ok = r.ok && r.pos == len(r.text) && rr.hasVotes == (len(o.ClaimVotes) > 0) &&
		(o.TaskTitle == "") == (rr.titleErr != "") && utf16Len(o.TaskTitle) <= MaxTaskTitle
	return r.ok && !r.bad
}

// MarshalJSON renders the binary form as a base64 string, so an Input
// holding a RoundResult survives a JSON round trip (Outcome.Inputs).
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
