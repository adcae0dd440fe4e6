package federation

import (
	"context"
	"errors"
	"fmt"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Holds (FedInboxMark.take_seqs). A receiving server takes a guaranteed
// seq in its system's Raft inbox before it delivers it. The local take
// (gactive) orders only this node's streams: a sender's resend through
// another server (a new leader's stream after the old one's was cut, a
// relay) may arrive there while this node's mark of the message is
// still on its way, and was delivered a second time ("16 after 51"
// across a leader kill). A hold lapses after AckTimeout: a server that
// died before marking what it delivered leaves it to be delivered again
// then (the window doc.go names).
//
// One Raft commit holds the envelope at hand and every guaranteed one
// already waiting on the stream, so the sequencer pays about one commit
// per batch, not per message. What the sequencer held and did not get
// to deliver is released when it stops, so another server's resend does
// not wait for the lapse.

// hold makes sure this node holds env's seq before it is delivered: nil
// then, else the ack to answer: "duplicate" (recorded meanwhile), 5001
// (link removed), or 5000 while another server holds it or the hold
// could not be stored. Run by the sequencer only.
func (in *inStream) hold(ctx context.Context, env *concordv1.FedEnvelope) *concordv1.FedAck {
	m, seq, gseq := in.m, env.GetSeq(), env.GetGuaranteedSeq()
	// Within half its lapse a hold is good for a delivery (bounded by
	// CallTimeout, below AckTimeout by default) and its mark.
	if until, ok := in.held[gseq]; !ok || until < m.now().Add(m.cfg.AckTimeout/2).UnixMilli() {
		seqs := []uint64{gseq}
	more:
		for len(in.gnext) < gQueue {
			select {
			case j := <-in.gq:
				in.gnext = append(in.gnext, j)
			default:
				break more
			}
		}
		for _, j := range in.gnext {
			if q := j.env.GetGuaranteedSeq(); q != gseq && j.env.GetSourceSystem() == in.peer {
				seqs = append(seqs, q)
			}
		}
		err := in.takeSeqs(ctx, seqs, m.now().Add(m.cfg.AckTimeout).UnixMilli())
		_, linked := m.deps.State.LinkEpoch(in.peer)
		switch {
		case errors.Is(err, ErrNoLink) && linked:
			// Relinked since guaranteedCheck: as there, the sender
			// resends on a stream of the new link.
			in.endStream()
			return retryAck(seq, "the link from "+in.peer+" was replaced since this stream opened: send again on a new stream")
		case errors.Is(err, ErrNoLink):
			return &concordv1.FedAck{Seq: seq, Code: CodeSystemNotFound, Message: "Federation link to " + in.peer + " removed"}
		case err != nil:
			return retryAck(seq, "guaranteed message not held for delivery: "+err.Error())
		}
	}
	if m.deps.State.InboxDone(in.peer, gseq) {
		return &concordv1.FedAck{Seq: seq, Duplicate: true}
	}
	if _, ok := in.held[gseq]; !ok {
		holder, _ := m.deps.State.InboxHolder(in.peer, gseq)
		return retryAck(seq, fmt.Sprintf("guaranteed message %d from %s being delivered by server %q", gseq, in.peer, holder))
	}
	delete(in.held, gseq) // its mark ends the hold; a resend holds it again
	return nil
}

// takeSeqs holds seqs for this node until untilMs (a past untilMs
// releases those it holds) and notes in held those it holds now.
func (in *inStream) takeSeqs(ctx context.Context, seqs []uint64, untilMs int64) error {
	m := in.m
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	_, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_INBOX_MARK, &concordv1.FedInboxMark{
		SourceSystemId: in.peer, LinkEpoch: in.epoch, TakeSeqs: seqs, Holder: m.cfg.NodeID,
		NowMs: m.now().UnixMilli(), UntilMs: untilMs})
	if err != nil {
		return fmt.Errorf("hold %d guaranteed messages from %s: %w", len(seqs), in.peer, err)
	}
	// Store.Apply returns once this node applied the entry (no result
	// codec): the state says who holds each seq.
	for _, q := range seqs {
		if holder, until := m.deps.State.InboxHolder(in.peer, q); holder == m.cfg.NodeID && until > m.now().UnixMilli() {
			in.held[q] = until
		} else {
			delete(in.held, q)
		}
	}
	return nil
}

// release gives up the seqs the sequencer held and did not deliver (its
// stream ended), so another server's resend need not wait for their
// lapse. Best effort: a failure leaves them to lapse.
func (in *inStream) release() {
	if len(in.held) == 0 {
		return
	}
	seqs := make([]uint64, 0, len(in.held))
	for q := range in.held {
		seqs = append(seqs, q)
	}
	if err := in.takeSeqs(in.m.bg, seqs, in.m.now().UnixMilli()); err != nil {
		in.m.log.Debug("guaranteed holds left to lapse", "peer", in.peer, "err", err)
	}
}
