package federation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Relaying the guaranteed drain. Only the leader drains an outbox; while
// its own stream to the peer is down it hands batches, one call at a
// time, to another node whose stream is up (OutboxRelay), which sends
// them on its stream in order and returns the peer's acks. The leader
// stays the only sender: its own stream does not drain while a relay
// call is out, and after a failed call (whose messages may still be on
// their way) no path sends for AckTimeout, so one seq is never being
// delivered through two peer servers at once.

// relayLoop relays the outbox while this node leads and its own stream is
// down, until ctx ends (run owns it).
func (l *outLink) relayLoop(ctx context.Context) {
	if !l.m.cfg.RelayGuaranteed || l.m.deps.NodeConn == nil || l.m.deps.Nodes == nil {
		return
	}
	t := time.NewTicker(l.m.cfg.BackoffMin)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.rwake:
		case <-t.C:
		}
		l.relayOnce(ctx)
	}
}

// relayOnce sends one batch through a relay node and stores its answers.
func (l *outLink) relayOnce(ctx context.Context) {
	l.mu.Lock()
	now := l.m.now()
	idle := l.up || now.Before(l.relayHold) || now.Before(l.relayNext)
	l.mu.Unlock()
	if idle || !l.mayDrain(ctx) {
		return
	}
	l.mu.Lock()
	if l.up {
		l.mu.Unlock()
		return
	}
	envs := l.relayBatch()
	l.relaying = len(envs) > 0
	l.mu.Unlock()
	if len(envs) == 0 {
		return
	}
	acks, sent, err := l.callRelay(ctx, envs)
	now = l.m.now()
	l.mu.Lock()
	switch {
	case err != nil && !sent:
		// No node took them: nothing is on its way, so the own stream
		// may send them as soon as it is back; ask again a little later.
		l.relayNext = now.Add(relayRetry * l.m.cfg.BackoffMin)
		for _, e := range envs {
			delete(l.gsent, e.GetGuaranteedSeq())
		}
	case err != nil:
		// Some may still reach the peer: nobody sends for AckTimeout.
		l.relayHold = now.Add(l.m.cfg.AckTimeout)
		for _, e := range envs {
			l.gsent[e.GetGuaranteedSeq()] = gsend{until: l.relayHold, held: true}
		}
	default:
		l.relayHold = time.Time{}
		for i, e := range envs {
			l.guaranteedAcked(e.GetGuaranteedSeq(), acks[i])
		}
	}
	l.relaying = false
	l.mu.Unlock()
	switch {
	case err != nil && !sent:
		l.log.Debug("no node relays guaranteed messages now", "n", len(envs), "err", err)
	case err != nil:
		l.log.Info("relaying guaranteed messages failed (sent again after AckTimeout)", "n", len(envs), "err", err)
	}
	l.commitAcks(ctx)
	l.signal()
}

// relayBatch returns the outbox's oldest messages due, up to the first
// held one (gpick: a relay call, like the own stream's drain, sends a
// prefix of what is left). l.mu is held.
func (l *outLink) relayBatch() []*concordv1.FedEnvelope {
	now := l.m.now()
	entries, floor := l.m.deps.State.OutboxPending(l.peer, min(drainWindow, maxBatch), l.gpick(now))
	var out []*concordv1.FedEnvelope
	bytes := 0
	for _, e := range entries {
		env := e.GetEnvelope()
		size := proto.Size(env)
		if len(out) > 0 && bytes+size > maxBatchBytes {
			break
		}
		bytes += size
		env.GuaranteedFloor = floor
		env.GuaranteedSeq = e.GetSeq()
		l.gsent[e.GetSeq()] = gsend{until: now.Add(time.Hour)} // until this call's answers are stored
		out = append(out, env)
	}
	return out
}

// relayOrder returns this system's other live nodes, those to try first
// for peer first (rendezvous hash: every leader prefers the same one).
func (l *outLink) relayOrder() []string {
	var ids []string
	for _, id := range l.m.deps.Nodes() {
		if id != l.m.cfg.NodeID {
			ids = append(ids, id)
		}
	}
	score := func(id string) uint32 { return hashString(l.peer + "/" + id) }
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(score(b), score(a)), cmp.Compare(a, b)) })
	return ids
}

// relayRetry: after no node took a batch, the leader asks again after
// this many BackoffMin.
const relayRetry = 4

// callRelay hands envs to the first node that takes them. A node whose
// stream is down (FailedPrecondition) or that has no such link
// (NotFound) refuses before sending anything, so
// the next is tried; any other failure ends the attempt, and sent reports
// that the messages may be on their way.
func (l *outLink) callRelay(ctx context.Context, envs []*concordv1.FedEnvelope) (acks []*concordv1.FedAck, sent bool, err error) {
	errs := []error{errNoRelay}
	for _, id := range l.relayOrder() {
		cc, err := l.m.deps.NodeConn(id)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", id, err))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, l.m.cfg.AckTimeout+l.m.cfg.CallTimeout)
		res, err := concordv1.NewFederationClient(cc).OutboxRelay(cctx, &concordv1.OutboxRelayRequest{PeerSystemId: l.peer, Envelopes: envs})
		cancel()
		switch {
		case status.Code(err) == codes.FailedPrecondition, status.Code(err) == codes.NotFound:
			errs = append(errs, fmt.Errorf("node %s: %w", id, err))
			continue
		case err != nil:
			return nil, true, fmt.Errorf("relay through node %s: %w", id, err)
		case len(res.GetAcks()) != len(envs):
			return nil, true, fmt.Errorf("relay through node %s: %d acks for %d messages", id, len(res.GetAcks()), len(envs))
		}
		return res.GetAcks(), true, nil
	}
	return nil, false, errors.Join(errs...)
}

var errNoRelay = errors.New("federation: no node with a stream up took the guaranteed messages")

// ---- the relay node's side ----

// OutboxRelay serves the leader's relay call (guaranteed.go's drain over
// this node's stream).
func (s *service) OutboxRelay(ctx context.Context, req *concordv1.OutboxRelayRequest) (*concordv1.OutboxRelayResponse, error) {
	s.m.mu.Lock()
	l := s.m.out[req.GetPeerSystemId()]
	s.m.mu.Unlock()
	if l == nil {
		return nil, status.Errorf(codes.NotFound, "federation: no link to %s on this node", req.GetPeerSystemId())
	}
	envs := req.GetEnvelopes()
	if len(envs) == 0 || len(envs) > maxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "federation: 1 to %d envelopes per relay", maxBatch)
	}
	for _, env := range envs {
		if env.GetGuaranteedSeq() == 0 || env.GetSourceSystem() != s.m.cfg.SystemID || env.GetTargetSystem() != l.peer {
			return nil, status.Errorf(codes.InvalidArgument, "federation: relayed envelope %q is not a guaranteed message from %s to %s",
				env.GetMessageId(), s.m.cfg.SystemID, l.peer)
		}
	}
	acks, err := l.relay(ctx, envs)
	if err != nil {
		return nil, err
	}
	return &concordv1.OutboxRelayResponse{Acks: acks}, nil
}

// relayCall collects the peer's acks to one relay call.
type relayCall struct {
	mu   sync.Mutex
	acks []*concordv1.FedAck
	left int
	done chan struct{}
}

func (c *relayCall) answer(i int, a *concordv1.FedAck) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acks[i] != nil {
		return
	}
	c.acks[i] = a
	if c.left--; c.left == 0 {
		close(c.done)
	}
}

// relay sends envs on this node's stream ahead of its buffer and returns
// the peer's acks in order; one not answered within AckTimeout (or ctx)
// reads as a retryable 5000, and one not sent by then never is.
func (l *outLink) relay(ctx context.Context, envs []*concordv1.FedEnvelope) ([]*concordv1.FedAck, error) {
	c := &relayCall{acks: make([]*concordv1.FedAck, len(envs)), left: len(envs), done: make(chan struct{})}
	queued := make([]*inflight, len(envs))
	now := l.m.now()
	for i, env := range envs {
		gseq := env.GetGuaranteedSeq()
		f := &inflight{it: &item{env: env, size: envSize(env), at: now}}
		f.relay = func(a *concordv1.FedAck) {
			a = proto.CloneOf(a)
			a.Seq = gseq
			c.answer(i, a)
		}
		f.it.done = func(o Outcome) { // lost stream or no ack in time
			msg := "relayed guaranteed message not acknowledged"
			if o.Err != nil {
				msg = o.Err.Message
			}
			f.relay(retryAck(gseq, msg))
		}
		queued[i] = f
	}
	l.mu.Lock()
	if !l.up {
		l.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "federation: this node's stream to %s is down", l.peer)
	}
	l.relayQ = append(l.relayQ, queued...)
	l.mu.Unlock()
	l.signal()
	t := time.NewTimer(l.m.cfg.AckTimeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	l.relayQ = slices.DeleteFunc(l.relayQ, func(f *inflight) bool { return slices.Contains(queued, f) })
	l.mu.Unlock()
	for i, env := range envs {
		c.answer(i, retryAck(env.GetGuaranteedSeq(), "relayed guaranteed message not acknowledged in time"))
	}
	return c.acks, nil
}

// popRelayed moves the relayed messages waiting onto batch, numbered for
// this stream. l.mu is held.
func (l *outLink) popRelayed(batch *concordv1.FedBatch, now time.Time) int {
	bytes := 0
	for len(l.relayQ) > 0 && len(batch.Envelopes) < maxBatch {
		f := l.relayQ[0]
		if len(batch.Envelopes) > 0 && bytes+f.it.size > maxBatchBytes {
			break
		}
		l.relayQ = l.relayQ[1:]
		bytes += f.it.size
		l.seq++
		f.it.env.Seq = l.seq
		f.sentAt = now
		l.inflight[l.seq] = f
		batch.Envelopes = append(batch.Envelopes, f.it.env)
	}
	return bytes
}

// failRelayed answers the relayed messages not yet sent (the stream went
// down). l.mu is not held.
func failRelayed(fs []*inflight, peer string) {
	for _, f := range fs {
		f.relay(retryAck(f.it.env.GetGuaranteedSeq(), "Federation link to "+peer+" lost before the relayed message was sent"))
	}
}
