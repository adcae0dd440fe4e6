package consensus

import (
	"bytes"
	"sync"
)

// The structural half of the round-output decoder. It decodes the result
// envelope into spans with exactly the semantics encoding/json had when it
// decoded into roundEnvelope (see output.go), because accepted outputs and
// their values must not change:
//
//   - member names match case-insensitively (bytes.EqualFold, as
//     encoding/json's folded-name lookup), unknown members are skipped;
//   - null leaves a plain string field unchanged and clears a pointer field;
//   - a repeated member decodes again into the same value: objects merge,
//     and a repeated array reuses the elements the earlier one left in its
//     backing array (encoding/json does not zero them), so list keeps every
//     element written since the slice was last replaced;
//   - any value of the wrong type rejects the whole result.

// optSpan is a decoded *string field: set is a non-nil pointer.
type optSpan struct {
	span
	set bool
}

// optFloat is a decoded *float64 field.
type optFloat struct {
	v   float64
	set bool
}

// optCode is a *string field the engine only compares with fixed names:
// code is 1 + the index of the name it equals, 0 for any other text.
type optCode struct {
	code uint8
	set  bool
}

// optLen is a *string field the engine only measures.
type optLen struct {
	n   int
	set bool
}

type claimSpans struct {
	title, statement span
	category         optCode
	claimID          optLen
}

type judgementSpans struct {
	claimID, rationale span
	stance             uint8
	confidence         optFloat
	revised, merges    optSpan
}

type voteSpans struct {
	claimID span
	vote    uint8
	reason  optSpan
}

// list is a decoded *[]T field. elems holds every element written since the
// slice was last replaced (its backing array); the value is elems[:n].
type list[T any] struct {
	elems []T
	n     int
	set   bool
}

func (l *list[T]) reset() { l.elems, l.n, l.set = l.elems[:0], 0, false }

// items returns the decoded elements.
func (l *list[T]) items() []T { return l.elems[:l.n] }

type outputSpans struct {
	participantID, phase, fullResponse, summary, taskTitle optSpan
	respondedAt                                            optLen
	round, selfScore                                       optFloat
	claims                                                 list[claimSpans]
	judgements                                             list[judgementSpans]
	votes                                                  list[voteSpans]
}

func (o *outputSpans) reset() {
	claims, judgements, votes := o.claims, o.judgements, o.votes
	*o = outputSpans{claims: claims, judgements: judgements, votes: votes}
	o.claims.reset()
	o.judgements.reset()
	o.votes.reset()
}

// outDecoder decodes one round result. Decoders are pooled: their arena
// and element buffers are reused across results.
type outDecoder struct {
	outScanner
	kind      optCode
	hasOutput bool
	out       outputSpans
}

var outDecoders = sync.Pool{New: func() any { return new(outDecoder) }}

// Buffers above these sizes are dropped rather than pooled, so one huge
// result does not pin its memory forever.
const (
	maxPooledArena = 64 << 10
	maxPooledElems = 1024
)

func getOutDecoder(raw []byte) *outDecoder {
	d := outDecoders.Get().(*outDecoder)
	d.in, d.pos, d.bad = raw, 0, false
	d.arena = d.arena[:0]
	d.kind, d.hasOutput = optCode{}, false
	d.out.reset()
	return d
}

func putOutDecoder(d *outDecoder) {
	d.in = nil
	if cap(d.arena) > maxPooledArena {
		d.arena = nil
	}
	if cap(d.out.claims.elems) > maxPooledElems || cap(d.out.judgements.elems) > maxPooledElems ||
		cap(d.out.votes.elems) > maxPooledElems || cap(d.stack) > maxPooledElems {
		d.out = outputSpans{}
		d.stack = nil
	}
	outDecoders.Put(d)
}

// parse decodes the whole result and reports whether encoding/json would
// have decoded it into roundEnvelope without error.
func (d *outDecoder) parse() bool {
	if !d.null() {
		if d.peek() != '{' {
			d.fail()
		}
		for more := d.beginObject(); more && !d.bad; more = d.nextMember() {
			switch envelopeField(d.objectKey()) {
			case 0:
				d.kind = d.optCode(kindNames)
			case 1:
				d.output()
			default:
				d.skip(1)
			}
		}
	}
	d.ws()
	if d.pos != len(d.in) {
		d.fail()
	}
	return !d.bad
}

func (d *outDecoder) output() {
	if d.null() {
		d.out.reset()
		d.hasOutput = false
		return
	}
	if d.peek() != '{' {
		d.fail()
		return
	}
	if !d.hasOutput {
		d.out.reset()
		d.hasOutput = true
	}
	o := &d.out
	for more := d.beginObject(); more && !d.bad; more = d.nextMember() {
		switch outputField(d.objectKey()) {
		case 0:
			o.participantID = d.optStr()
		case 1:
			o.phase = d.optStr()
		case 2:
			o.round = d.optFloat()
		case 3:
			o.fullResponse = d.optStr()
		case 4:
			o.summary = d.optStr()
		case 5:
			o.taskTitle = d.optStr()
		case 6:
			decodeList(d, &o.claims, (*outDecoder).claim)
		case 7:
			decodeList(d, &o.judgements, (*outDecoder).judgement)
		case 8:
			decodeList(d, &o.votes, (*outDecoder).vote)
		case 9:
			o.selfScore = d.optFloat()
		case 10:
			o.respondedAt = d.optLen()
		default:
			d.skip(2)
		}
	}
}

// decodeList decodes an array of objects into l (depth 3; elements are at
// depth 4). A null element leaves its slot as it was, like encoding/json.
func decodeList[T any](d *outDecoder, l *list[T], elem func(*outDecoder, *T)) {
	if d.null() {
		l.reset()
		return
	}
	if d.peek() != '[' {
		d.fail()
		return
	}
	if !l.set {
		l.reset()
		l.set = true
	}
	i := 0
	for more := d.beginArray(); more && !d.bad; more = d.nextElement() {
		if i == len(l.elems) {
			var zero T
			l.elems = append(l.elems, zero)
		}
		if !d.null() {
			if d.peek() != '{' {
				d.fail()
				return
			}
			elem(d, &l.elems[i])
		}
		i++
	}
	if i == 0 {
		l.elems = l.elems[:0] // encoding/json replaces the slice by a new empty one
	}
	l.n = i
}

func (d *outDecoder) claim(c *claimSpans) {
	for more := d.beginObject(); more && !d.bad; more = d.nextMember() {
		switch claimField(d.objectKey()) {
		case 0:
			d.plainStr(&c.title)
		case 1:
			d.plainStr(&c.statement)
		case 2:
			c.category = d.optCode(categoryNames)
		case 3:
			c.claimID = d.optLen()
		default:
			d.skip(4)
		}
	}
}

func (d *outDecoder) judgement(j *judgementSpans) {
	for more := d.beginObject(); more && !d.bad; more = d.nextMember() {
		switch judgementField(d.objectKey()) {
		case 0:
			d.plainStr(&j.claimID)
		case 1:
			d.plainCode(&j.stance, stanceNames)
		case 2:
			j.confidence = d.optFloat()
		case 3:
			d.plainStr(&j.rationale)
		case 4:
			j.revised = d.optStr()
		case 5:
			j.merges = d.optStr()
		default:
			d.skip(4)
		}
	}
}

func (d *outDecoder) vote(v *voteSpans) {
	for more := d.beginObject(); more && !d.bad; more = d.nextMember() {
		switch voteField(d.objectKey()) {
		case 0:
			d.plainStr(&v.claimID)
		case 1:
			d.plainCode(&v.vote, voteNames)
		case 2:
			v.reason = d.optStr()
		default:
			d.skip(4)
		}
	}
}

// plainStr decodes a string into a plain string field (null: unchanged).
func (d *outDecoder) plainStr(dst *span) {
	if !d.null() {
		*dst = d.str()
	}
}

// optStr decodes a *string field (null: absent).
func (d *outDecoder) optStr() optSpan {
	if d.null() {
		return optSpan{}
	}
	return optSpan{d.str(), true}
}

// code decodes a string and returns its optCode code. The text is not
// kept: a string without escapes is compared in place, any other is
// decoded into the arena and dropped again.
func (d *outDecoder) code(fixed [][]byte) uint8 {
	text, ok := d.rawString()
	if !ok {
		sp := d.str()
		text = d.arena[sp.off:sp.end]
		d.arena = d.arena[:sp.off] // text stays readable until the next append
	}
	for i, f := range fixed {
		if bytes.Equal(text, f) {
			return uint8(i + 1)
		}
	}
	return 0
}

func (d *outDecoder) plainCode(dst *uint8, fixed [][]byte) {
	if !d.null() {
		*dst = d.code(fixed)
	}
}

func (d *outDecoder) optCode(fixed [][]byte) optCode {
	if d.null() {
		return optCode{}
	}
	return optCode{d.code(fixed), true}
}

// optLen decodes a *string field and keeps only its length.
func (d *outDecoder) optLen() optLen {
	if d.null() {
		return optLen{}
	}
	sp := d.str()
	d.arena = d.arena[:sp.off]
	return optLen{sp.len(), true}
}

// optFloat decodes a *float64 field (null: absent).
func (d *outDecoder) optFloat() optFloat {
	if d.null() {
		return optFloat{}
	}
	if c := d.peek(); c != '-' && !isDigit(c) {
		d.fail()
		return optFloat{}
	}
	return optFloat{d.float(), true}
}
