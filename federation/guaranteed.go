package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Guaranteed delivery (federation.md §4). A guaranteed message is written
// to the link's outbox in this system's Raft log (FED_OUTBOX_PUT) before
// its sender hears anything; the leader's stream to the peer drains the
// outbox in seq order and removes a message (FED_OUTBOX_ACK) only once the
// peer answered it. The peer delivers, records the seq in its own Raft log
// (FED_INBOX_MARK) and only then acknowledges, so a message sent again
// after a kill or a lost ack is answered "duplicate" and not delivered
// twice.

// drainWindow bounds the guaranteed messages in flight on one stream.
const drainWindow = 256

// wantsGuarantee reports whether msg asks for guaranteed delivery:
// meta.delivery "guaranteed", or a link whose policy says so.
func wantsGuarantee(meta []byte, link *concordv1.FedLink) bool {
	if link.GetOutbox().GetGuaranteed() {
		return true
	}
	if len(meta) == 0 {
		return false
	}
	var m struct {
		Delivery string `json:"delivery"`
	}
	return json.Unmarshal(meta, &m) == nil && m.Delivery == "guaranteed"
}

// sendGuaranteed stores env in the outbox of the link to its target and
// tells done: the peer's answer when it comes within GuaranteedWait while
// this node's stream is up, else "queued" (the message is in the Raft log
// and will be delivered), or why it was refused (5000 outbox full or
// outcome unknown, 5001 no direct link).
func (m *Manager) sendGuaranteed(env *concordv1.FedEnvelope, ol *outLink, done func(Outcome)) {
	if ol.peer != env.GetTargetSystem() {
		done(Outcome{Err: codeErr(CodeSystemNotFound, "Guaranteed delivery to "+env.GetTargetSystem()+" needs a direct link (this message would cross "+ol.peer+")",
			map[string]any{"systemId": env.GetTargetSystem()})})
		return
	}
	id := env.GetMessageId()
	answer := make(chan Outcome, 1) // onAcked's send never blocks
	m.gmu.Lock()
	if m.gclosed {
		m.gmu.Unlock()
		done(Outcome{Err: codeErr(CodeUnavailable, "federation stopped on this node", map[string]any{"retryable": true})})
		return
	}
	m.gwait[id] = answer
	m.bgWG.Add(1)
	m.gmu.Unlock()
	go func() {
		defer m.bgWG.Done()
		defer m.dropWaiter(id)
		ctx, cancel := context.WithTimeout(m.bg, m.cfg.CallTimeout)
		defer cancel()
		_, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_OUTBOX_PUT,
			&concordv1.FedOutboxPut{PeerSystemId: ol.peer, Envelope: env, NowMs: m.now().UnixMilli()})
		if err != nil {
			done(Outcome{Err: outboxPutError(ol.peer, err)})
			return
		}
		ol.signal()
		if ol.isUp() {
			t := time.NewTimer(m.cfg.GuaranteedWait)
			defer t.Stop()
			select {
			case o := <-answer:
				done(o)
				return
			case <-t.C:
			case <-m.bg.Done():
			}
		}
		select {
		case o := <-answer:
			done(o)
		default:
			done(Outcome{Queued: true})
		}
	}()
}

func outboxPutError(peer string, err error) *CodeError {
	switch {
	case errors.Is(err, ErrOutboxFull):
		return codeErr(CodeUnavailable, "Federation outbox to "+peer+" is full: "+err.Error(), map[string]any{"retryable": true, "systemId": peer})
	case errors.Is(err, ErrNoLink):
		return codeErr(CodeSystemNotFound, "Federation link to "+peer+" removed", map[string]any{"systemId": peer})
	}
	return codeErr(CodeUnavailable, "Guaranteed message to "+peer+" not confirmed stored (it may or may not be queued): "+err.Error(),
		map[string]any{"retryable": true, "systemId": peer})
}

func (m *Manager) dropWaiter(id string) {
	m.gmu.Lock()
	delete(m.gwait, id)
	m.gmu.Unlock()
}

// onAcked hears every applied FED_OUTBOX_ACK (State.OnAck, on the FSM
// goroutine): a sender on this node waiting for one of those messages
// hears the peer's answer.
func (m *Manager) onAcked(peer string, acked []Acked) {
	for _, a := range acked {
		m.gmu.Lock()
		answer := m.gwait[a.MessageID]
		delete(m.gwait, a.MessageID)
		m.gmu.Unlock()
		if answer != nil {
			answer <- ackOutcome(peer, a.Ack) // buffered; the sender's goroutine replies
		}
	}
}

// ackOutcome is what a sender hears of an ack. A duplicate was answered
// before (that answer was lost): the message reached the peer, its
// outcome is not known here, so it reads as queued.
func ackOutcome(peer string, a *concordv1.FedAck) Outcome {
	switch {
	case a.GetCode() != 0:
		return Outcome{Err: codeErr(int(a.GetCode()), a.GetMessage(), map[string]any{"systemId": peer})}
	case a.GetQueued(), a.GetDuplicate():
		return Outcome{Queued: true}
	}
	return Outcome{Delivered: a.GetDelivered()}
}

// stopGuaranteed ends the waits of guaranteed sends (Run's exit).
func (m *Manager) stopGuaranteed() {
	m.gmu.Lock()
	m.gclosed = true
	m.gmu.Unlock()
	m.bgCancel()
	m.bgWG.Wait()
}

// ---- the draining side (outLink, on the leader) ----

// mayDrain reports whether this node drains the outbox to the peer now:
// it leads, and (when the outbox holds anything) a quorum confirms it, so
// a deposed leader that has not noticed yet does not send alongside its
// successor.
func (l *outLink) mayDrain(ctx context.Context) bool {
	if !l.m.deps.IsLeader() {
		return false
	}
	if n, _ := l.m.deps.State.OutboxSize(l.peer); n == 0 || l.m.deps.VerifyLeader == nil {
		return n > 0
	}
	ctx, cancel := context.WithTimeout(ctx, l.m.cfg.CallTimeout)
	defer cancel()
	if err := l.m.deps.VerifyLeader(ctx); err != nil {
		l.log.Debug("not draining the outbox: leadership not confirmed", "err", err)
		return false
	}
	return true
}

// gsend is when an outbox seq this node sent may be sent again, and
// whether it is held: pausing after a retryable refusal or a failed relay
// call, rather than in flight or answered.
type gsend struct {
	until time.Time
	held  bool
}

// gpick is the drain's rule for each outbox seq, oldest first (l.mu is
// held): one in flight or answered is passed over, one held stops the
// drain there, any other is sent. The peer delivers in seq order
// (guaranteed_order.go) and would refuse everything after a held message
// until it came again, so sending past it would only cost a round and a
// pause (strict in-order drain per link).
func (l *outLink) gpick(now time.Time) func(seq uint64) (take, stop bool) {
	return func(seq uint64) (bool, bool) {
		g, ok := l.gsent[seq]
		switch {
		case !ok || !now.Before(g.until):
			return true, false
		case g.held:
			return false, true
		}
		return false, false
	}
}

// drainBatch appends to batch (holding bytes so far) the outbox messages
// due on this stream, up to the first held one (gpick), numbering them
// for the stream. l.mu is held.
func (l *outLink) drainBatch(batch *concordv1.FedBatch, bytes int, now time.Time) {
	if l.relaying || now.Before(l.relayHold) {
		return // relay.go: one path at a time
	}
	_, floor := l.m.deps.State.OutboxPending(l.peer, 0, nil)
	for q := range l.gsent {
		if q < floor { // answered and stored (by this node or a former leader)
			delete(l.gsent, q)
		}
	}
	room := min(drainWindow-len(l.gsent), maxBatch-len(batch.Envelopes))
	if room <= 0 {
		return
	}
	entries, floor := l.m.deps.State.OutboxPending(l.peer, room, l.gpick(now))
	for _, e := range entries {
		size := proto.Size(e.GetEnvelope())
		if len(batch.Envelopes) > 0 && bytes+size > maxBatchBytes {
			return
		}
		bytes += size
		env := e.GetEnvelope()
		env.GuaranteedFloor = floor
		l.seq++
		env.Seq = l.seq
		l.inflight[l.seq] = &inflight{it: &item{env: env, size: envSize(env)}, sentAt: now, gseq: e.GetSeq()}
		l.gsent[e.GetSeq()] = gsend{until: now.Add(l.m.cfg.AckTimeout)} // resent when not answered by then
		batch.Envelopes = append(batch.Envelopes, env)
	}
}

// guaranteedAcked handles the peer's answer to an outbox message: a
// retryable refusal sends it again after a pause; any other answer is
// recorded so the message leaves the outbox (commitAcks).
func (l *outLink) guaranteedAcked(gseq uint64, a *concordv1.FedAck) {
	if a.GetCode() == CodeUnavailable {
		l.gsent[gseq] = gsend{until: l.m.now().Add(5 * l.m.cfg.BackoffMin), held: true}
		return
	}
	ack := &concordv1.FedAck{Seq: gseq, Code: a.GetCode(), Message: a.GetMessage(), Delivered: a.GetDelivered(),
		Queued: a.GetQueued(), Duplicate: a.GetDuplicate()}
	l.gacks = append(l.gacks, ack)
	l.gsent[gseq] = gsend{until: l.m.now().Add(time.Hour)} // not resent while its ack is being stored
}

// commitAcks removes the answered messages from the outbox. When that
// fails they are sent again and the peer answers "duplicate".
func (l *outLink) commitAcks(ctx context.Context) {
	l.mu.Lock()
	acks := l.gacks
	l.gacks = nil
	l.mu.Unlock()
	if len(acks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.m.cfg.CallTimeout)
	defer cancel()
	_, _, err := l.m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_OUTBOX_ACK,
		&concordv1.FedOutboxAck{PeerSystemId: l.peer, Acks: acks})
	if err != nil {
		l.log.Warn("store guaranteed acks (they will be sent again)", "n", len(acks), "err", err)
	}
	for _, a := range acks {
		if a.GetCode() != 0 && err == nil {
			// Its sender may have heard "queued" long ago: say so here.
			l.log.Info("guaranteed message refused by the peer", "outbox_seq", a.GetSeq(), "code", a.GetCode(), "reason", a.GetMessage())
		}
	}
	l.mu.Lock()
	for _, a := range acks {
		delete(l.gsent, a.GetSeq())
	}
	l.mu.Unlock()
}

// ---- the receiving side (inStream; guaranteed_order.go runs it) ----

// gkey names a guaranteed message taken for delivery: its source, the
// epoch of the link it came over (a relinked link numbers from 1 again,
// and an old link's unfinished message must neither hold back nor clear
// the new link's) and its outbox seq.
type gkey struct {
	source string
	epoch  uint64
	seq    uint64
}

// gentry is a guaranteed message taken for delivery on this node: since
// when, and whether its outcome is final (delivered, or refused for
// good) with its inbox mark still to commit. It is dropped once the mark
// committed (the local replica has it then: Store.Apply returns after
// this node applied it) or, not final, when the delivery failed
// retryably.
type gentry struct {
	at    time.Time
	final bool
}

// gapLimit bounds the unrecorded earlier seqs one check looks at: more
// than a sender ever has unanswered on its streams (drainWindow), so
// anything past it is refused as out of order.
const gapLimit = 4 * drainWindow

// guaranteedCheck decides whether to deliver a guaranteed envelope now:
// nil to deliver it (it is then taken, gactive), else the ack to answer
// at once: "duplicate" (recorded already), or 5000 (not now: it is being
// delivered or recorded here, or an earlier seq is not done yet).
//
// Order (per source system): a seq is delivered only once every earlier
// seq from its source, down to the sender's floor (all below it was
// answered), is recorded in the inbox or final here. The caller
// delivers one guaranteed message at a time per stream and waits for its
// outcome (guaranteed_order.go), so an earlier seq's outcome is known
// before the next is checked, and a seq refused retryably, or never seen
// here, holds back everything after it until it has come again: a resend
// never overtakes a later message.
func (in *inStream) guaranteedCheck(ctx context.Context, env *concordv1.FedEnvelope) *concordv1.FedAck {
	m, seq, gseq := in.m, env.GetSeq(), env.GetGuaranteedSeq()
	if env.GetSourceSystem() != in.peer || env.GetTargetSystem() != m.cfg.SystemID {
		return &concordv1.FedAck{Seq: seq, Code: CodeInvalidParams, Message: "guaranteed messages cross one link: " +
			env.GetSourceSystem() + " sent one through " + in.peer}
	}
	if e, ok := m.deps.State.LinkEpoch(in.peer); ok && in.epoch != 0 && e != in.epoch {
		// The link was replaced (a relink) since this stream opened: its
		// marks name the old link and would be dropped, so a message
		// delivered here would be acknowledged without a record in the
		// new link's inbox (no dedupe of a resend). Refuse it, retryably,
		// and end the stream: the sender resends on a stream of the new
		// link. (A stream of epoch 0, a link stored by an older binary,
		// marks without an epoch: its marks apply to whatever link is
		// there, so nothing is dropped.)
		in.endStream()
		return &concordv1.FedAck{Seq: seq, Code: CodeUnavailable, Message: "the link from " + in.peer +
			" was replaced since this stream opened: send again on a new stream"}
	}
	if !in.barriered && m.deps.Barrier != nil {
		// Marks committed through another node before this stream opened
		// must be visible before the first dedupe check.
		bctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		err := m.deps.Barrier(bctx)
		cancel()
		if err != nil {
			return retryAck(seq, "Federation peer "+m.cfg.SystemID+" is not ready: "+err.Error())
		}
		in.barriered = true
	}
	k := gkey{in.peer, in.epoch, gseq}
	if m.deps.State.InboxDone(k.source, k.seq) {
		return &concordv1.FedAck{Seq: seq, Duplicate: true}
	}
	gaps, all := m.deps.State.InboxGaps(in.peer, max(env.GetGuaranteedFloor(), 1), gseq, gapLimit)
	now := m.now()
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if e, ok := m.gactive[k]; ok {
		switch {
		case e.final:
			return retryAck(seq, "guaranteed message being recorded")
		case now.Sub(e.at) < m.cfg.AckTimeout:
			return retryAck(seq, "guaranteed message being delivered")
		}
		// Older than AckTimeout and not final: a delivery whose end was
		// lost. Take it over rather than refuse the message for ever.
	}
	for _, q := range gaps {
		// InboxDone again: its mark may have committed (and its entry
		// gone) since InboxGaps read the inbox. Lock order: gmu, then
		// the State's lock (which never calls out while held).
		if e := m.gactive[gkey{in.peer, in.epoch, q}]; !e.final && !m.deps.State.InboxDone(in.peer, q) {
			return retryAck(seq, fmt.Sprintf("guaranteed message %d from %s must be delivered first", q, in.peer))
		}
	}
	if !all {
		return retryAck(seq, fmt.Sprintf("guaranteed message %d from %s is too far ahead of its floor %d", gseq, in.peer, env.GetGuaranteedFloor()))
	}
	m.gactive[k] = gentry{at: now}
	return nil
}

func retryAck(seq uint64, msg string) *concordv1.FedAck {
	return &concordv1.FedAck{Seq: seq, Code: CodeUnavailable, Message: msg}
}

// guaranteedDone records a delivered (or finally refused) guaranteed
// envelope: its ack waits until the seq is in the inbox (marker). A
// retryable refusal is answered at once and not recorded; the order
// check then holds back later seqs until it comes again.
func (in *inStream) guaranteedDone(env *concordv1.FedEnvelope, a *concordv1.FedAck) {
	k := gkey{in.peer, in.epoch, env.GetGuaranteedSeq()}
	in.m.gmu.Lock()
	if a.GetCode() == CodeUnavailable {
		delete(in.m.gactive, k) // not recorded: the sender tries again
	} else if e, ok := in.m.gactive[k]; ok {
		e.final = true
		in.m.gactive[k] = e
	}
	in.m.gmu.Unlock()
	if a.GetCode() == CodeUnavailable {
		in.pushAck(a)
		return
	}
	g := gmark{seq: env.GetGuaranteedSeq(), floor: env.GetGuaranteedFloor(), ack: a}
	in.mu.Lock()
	closed := in.closed
	if !closed {
		in.gmarks = append(in.gmarks, g)
	}
	in.mu.Unlock()
	if closed {
		// The stream ended while it was being delivered: record it all
		// the same, so the sender's retry is answered "duplicate".
		in.markLater([]gmark{g})
		return
	}
	select {
	case in.markWake <- struct{}{}:
	default:
	}
}

// marker records delivered guaranteed messages in the inbox as they
// come, then queues their acks for the writer, until ctx ends. It does
// not wait on the writer: a peer that stopped reading (its acks stuck)
// must not keep messages unrecorded, or their resend through another
// server would be delivered again. Marks that fail are tried again
// (order kept) every BackoffMin: the messages were delivered, so asking
// the sender to resend them would deliver them twice.
func (in *inStream) marker(ctx context.Context) {
	var retry []gmark
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			in.mu.Lock()
			in.gmarks = append(retry, in.gmarks...) // closeMarks records them
			in.mu.Unlock()
			return
		case <-in.markWake:
		case <-t.C:
		}
		in.mu.Lock()
		marks := append(retry, in.gmarks...)
		in.gmarks = nil
		in.mu.Unlock()
		if len(marks) == 0 {
			continue
		}
		acks, err := in.markAndAck(in.m.bg, marks) // not the stream's ctx: record them even if it ends now
		retry = nil
		if err != nil {
			in.m.log.Warn("guaranteed messages not recorded yet (trying again)", "peer", in.peer, "err", err)
			retry = marks
			t.Reset(in.m.cfg.BackoffMin)
			continue
		}
		in.mu.Lock()
		in.acks = append(in.acks, acks...)
		in.mu.Unlock()
		in.signal()
	}
}

// closeMarks ends the stream's marking: what still waits is recorded on
// a goroutine of the manager (its acks have nowhere to go).
func (in *inStream) closeMarks() {
	in.mu.Lock()
	in.closed = true
	marks := in.gmarks
	in.gmarks = nil
	in.mu.Unlock()
	if len(marks) > 0 {
		in.markLater(marks)
	}
}

// markLater records marks on a goroutine of the manager, trying again
// every BackoffMin until they commit or the manager stops.
func (in *inStream) markLater(marks []gmark) {
	m := in.m
	m.gmu.Lock()
	if m.gclosed {
		m.gmu.Unlock()
		return
	}
	m.bgWG.Add(1)
	m.gmu.Unlock()
	go func() {
		defer m.bgWG.Done()
		for {
			_, err := in.markAndAck(m.bg, marks)
			if err == nil {
				return
			}
			m.log.Warn("guaranteed messages not recorded yet (trying again)", "peer", in.peer, "err", err)
			select {
			case <-m.bg.Done():
				return
			case <-time.After(m.cfg.BackoffMin):
			}
		}
	}()
}

type gmark struct {
	seq, floor uint64
	ack        *concordv1.FedAck
}

// markAndAck stores the processed seqs in this system's inbox and, once
// they are there, returns their acks. On failure nothing changes: the
// messages stay taken (gactive, final), so a resend meanwhile is refused
// with 5000 rather than delivered again, and the caller tries again. The
// window left is this node dying before the mark commits: the sender
// then resends and the message is delivered again (doc.go).
func (in *inStream) markAndAck(ctx context.Context, marks []gmark) ([]*concordv1.FedAck, error) {
	m := in.m
	mark := &concordv1.FedInboxMark{SourceSystemId: in.peer, LinkEpoch: in.epoch}
	for _, g := range marks {
		mark.Seqs = append(mark.Seqs, g.seq)
		mark.Floor = max(mark.Floor, g.floor)
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	_, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_INBOX_MARK, mark)
	switch {
	case errors.Is(err, ErrNoLink):
		// The link is gone (or replaced by a relink), and its inbox with
		// it: nothing to record.
	case err != nil:
		return nil, fmt.Errorf("record %d guaranteed messages from %s: %w", len(marks), in.peer, err)
	}
	acks := make([]*concordv1.FedAck, 0, len(marks))
	m.gmu.Lock()
	for _, g := range marks {
		delete(m.gactive, gkey{in.peer, in.epoch, g.seq})
		acks = append(acks, g.ack)
	}
	m.gmu.Unlock()
	return acks, nil
}
