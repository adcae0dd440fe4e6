package federation

import (
	"context"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Guaranteed messages are delivered strictly in seq order per source
// system. A stream's reader hands them to the stream's sequencer, which
// delivers one at a time and waits for its outcome before it checks the
// next (guaranteedCheck): had it started the next while the earlier one's
// outcome was unknown, an earlier message that then failed retryably
// (or whose mark failed) would be resent behind it. Best-effort messages
// on the stream go on meanwhile; the two kinds were never ordered with
// each other (they travel through the outbox and the buffer).

// gQueue bounds the guaranteed messages waiting for one stream's
// sequencer: a sender has at most drainWindow of them in flight on a
// stream, plus one relayed batch.
const gQueue = drainWindow + maxBatch

// gjob is a guaranteed envelope waiting for the sequencer, with the link
// as read for its batch.
type gjob struct {
	env    *concordv1.FedEnvelope
	link   *concordv1.FedLink
	linked bool
}

// enqueueGuaranteed hands j to the sequencer; when its queue is full the
// message is refused retryably (the order check then holds back the seqs
// after it until it comes again).
func (in *inStream) enqueueGuaranteed(j gjob) {
	select {
	case in.gq <- j:
	default:
		in.pushAck(retryAck(j.env.GetSeq(), "too many guaranteed messages waiting on this stream"))
	}
}

// sequencer delivers the stream's guaranteed messages in arrival order,
// one at a time, until ctx ends (the Link handler owns it).
func (in *inStream) sequencer(ctx context.Context) {
	defer in.release()
	for {
		if len(in.gnext) > 0 {
			j := in.gnext[0]
			in.gnext = in.gnext[1:]
			in.deliverGuaranteed(ctx, j.env, j.link, j.linked)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case j := <-in.gq:
			in.deliverGuaranteed(ctx, j.env, j.link, j.linked)
		}
	}
}

// deliverGuaranteed delivers one guaranteed envelope if its turn has come
// and waits for the outcome, at most CallTimeout: a delivery still
// unfinished then stays taken (gactive, not final), so the seqs after it
// are refused retryably until it ends, and order still holds.
func (in *inStream) deliverGuaranteed(ctx context.Context, env *concordv1.FedEnvelope, link *concordv1.FedLink, linked bool) {
	if a := in.guaranteedCheck(ctx, env); a != nil {
		in.pushAck(a)
		return
	}
	if a := in.hold(ctx, env); a != nil {
		in.guaranteedDone(env, a) // releases the local take
		return
	}
	done := make(chan struct{})
	in.dispatch(ctx, env, link, linked, func(seq uint64, cerr *CodeError, delivered []string) {
		in.guaranteedDone(env, newAck(seq, cerr, delivered))
		close(done)
	})
	select {
	case <-done: // a local agent: answered at once, no timer needed
		return
	default:
	}
	t := time.NewTimer(in.m.cfg.CallTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		in.m.log.Warn("guaranteed delivery unfinished (later messages wait)", "peer", in.peer, "outbox_seq", env.GetGuaranteedSeq())
	case <-ctx.Done():
	}
}
