package cluster

import (
	"errors"
	"fmt"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Sentinel errors of package cluster. Compare with errors.Is.
var (
	// ErrInvalidConfig wraps every Config.Validate failure and every
	// constructor refusal of a missing collaborator.
	ErrInvalidConfig = errors.New("cluster: invalid config")

	// ErrNoLeader is returned by Forwarder.Forward when no leader could be
	// reached within Config.ForwardRetryTimeout (or the caller's deadline):
	// there was no leader, or it was unknown to gossip, or unreachable.
	// Nothing was proposed, so the caller may retry. The error also matches
	// raftstore.ErrNoLeader; the MAP layer maps both to error 4000 with
	// data.retryable=true and details.reason="no_leader".
	ErrNoLeader = errors.New("cluster: no leader reachable")

	// ErrNotLeader is returned by Reconciler.AdmitDrain on a node that does
	// not lead (or whose reconciler has not seen its leadership yet): the
	// caller asks the leader, or retries.
	ErrNotLeader = errors.New("cluster: not the leader")

	// ErrPeerUnavailable is returned by PeerStreams.Send (and reported to
	// PeerStreams.Submit callbacks) when the recipient's node is not an alive
	// member, or no stream to it could be opened before the message's
	// deadline. The message was not delivered (DELIVERY_FAILED).
	ErrPeerUnavailable = errors.New("cluster: peer unavailable")

	// ErrDeliveryTimeout is reported when a message was sent to the peer but
	// not acknowledged before its deadline, or the stream broke before the
	// ack came. The message may or may not have reached the recipient (MAP
	// send is at-most-once); it is reported as DELIVERY_FAILED.
	ErrDeliveryTimeout = errors.New("cluster: no delivery ack before the deadline")

	// ErrRemoteDelivery is matched by every *DeliveryError: the peer
	// received the message and could not hand it to the recipient.
	ErrRemoteDelivery = errors.New("cluster: remote delivery failed")

	// ErrClosed is returned by PeerStreams after Close and by Server.Serve
	// after Shutdown.
	ErrClosed = errors.New("cluster: closed")
)

// DeliveryError is a per-recipient failure reported in a peer's RelayAck.
// errors.Is matches ErrRemoteDelivery and, by code, router.ErrNotConnected,
// rpc.ErrSlowConsumer or router.ErrBadEnvelope, so the router can report
// the same reason as for a local recipient.
type DeliveryError struct {
	// Code is the receiver's classification.
	Code concordv1.RelayFailureCode
	// Reason is the receiver's description (diagnostics only).
	Reason string
}

// Error implements error.
func (e *DeliveryError) Error() string {
	return fmt.Sprintf("cluster: remote delivery failed: %s: %s", e.Code, e.Reason)
}

// Unwrap returns ErrRemoteDelivery and the sentinel of the code.
func (e *DeliveryError) Unwrap() []error {
	out := []error{ErrRemoteDelivery}
	if s := sentinelOf(e.Code); s != nil {
		out = append(out, s)
	}
	return out
}
