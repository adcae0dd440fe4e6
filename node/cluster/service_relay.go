package cluster

import (
	"context"
	"errors"
	"io"

	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// recvResult is one Recv outcome handed from a stream's reader goroutine.
type recvResult[T any] struct {
	msg *T
	err error
}

// receive runs recv (a server stream's Recv) on a goroutine the Server
// waits for, so that a handler can wait for Shutdown as well as for the
// peer's next message. It hands every outcome over until Recv fails, or
// until ctx (the stream's, ended when the handler returns) ends.
func receive[T any](ctx context.Context, s *Server, recv func() (*T, error)) <-chan recvResult[T] {
	in := make(chan recvResult[T])
	s.wg.Add(1)
	go func() { // ends when Recv fails, which it does once the handler returned
		defer s.wg.Done()
		for {
			m, err := recv()
			select {
			case in <- recvResult[T]{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return in
}

// Relay is the receiving side of a peer's relay stream: every envelope of a
// batch is delivered locally (messages) or published (events), in order,
// then the batch is acknowledged with its failures. The handler returns
// when the peer closes the stream or the Server shuts down; a reader
// goroutine does the blocking Recv so that shutdown need not wait for the
// peer's next batch.
func (v *service) Relay(stream concordv1.Cluster_RelayServer) error {
	ctx := stream.Context()
	in := receive(ctx, v.s, stream.Recv)
	var from string
	for {
		select {
		case <-v.s.stopping:
			return nil
		case r := <-in:
			if errors.Is(r.err, io.EOF) {
				return nil
			}
			if r.err != nil {
				return r.err
			}
			if from == "" {
				from = r.msg.GetFromNodeId()
				v.s.log.Debug("relay stream from peer", "peer", from)
			}
			if err := stream.Send(v.handleBatch(ctx, r.msg)); err != nil {
				return err
			}
		}
	}
}

// handleBatch delivers one batch and builds its ack.
func (v *service) handleBatch(ctx context.Context, b *concordv1.RelayBatch) *concordv1.RelayAck {
	ack := &concordv1.RelayAck{}
	var env router.Envelope // reused: LocalDeliverer must not retain it
	for _, e := range b.GetEnvelopes() {
		ack.UpToSeq = e.GetSeq()
		var err error
		switch e.GetKind() {
		case concordv1.RelayKind_RELAY_KIND_MESSAGE:
			if err = checkRelayMessage(e.GetMessage()); err != nil {
				break
			}
			if v.s.deps.Deliverer == nil {
				err = router.ErrNotConnected
				break
			}
			env = router.Envelope{Message: e.GetMessage(), RecipientAgentID: e.GetRecipientAgentId(), RecipientSessionID: e.GetRecipientSessionId()}
			err = v.s.deps.Deliverer.DeliverLocal(ctx, &env)
		case concordv1.RelayKind_RELAY_KIND_EVENT:
			if err = checkRelayEvent(e.GetEvent()); err == nil && v.s.deps.Events != nil {
				v.s.deps.Events.PublishEphemeral(eventFromWire(e.GetEvent()))
			}
		default:
			err = router.ErrBadEnvelope
		}
		if err != nil {
			ack.Failures = append(ack.Failures, &concordv1.RelayFailure{
				Seq: e.GetSeq(), RecipientAgentId: e.GetRecipientAgentId(),
				Code: failureCodeOf(err), Reason: err.Error(),
			})
		}
	}
	return ack
}
