package cluster

import (
	"errors"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// sentinelOf maps a receiver's failure code to the error a local delivery
// would have returned, so the sending router reports the same reason.
func sentinelOf(c concordv1.RelayFailureCode) error {
	switch c {
	case concordv1.RelayFailureCode_RELAY_FAILURE_CODE_NOT_CONNECTED:
		return router.ErrNotConnected
	case concordv1.RelayFailureCode_RELAY_FAILURE_CODE_SLOW_CONSUMER:
		return rpc.ErrSlowConsumer
	case concordv1.RelayFailureCode_RELAY_FAILURE_CODE_BAD_ENVELOPE:
		return router.ErrBadEnvelope
	}
	return nil
}

// failureCodeOf classifies a LocalDeliverer error for the ack.
func failureCodeOf(err error) concordv1.RelayFailureCode {
	switch {
	case errors.Is(err, router.ErrNotConnected), errors.Is(err, rpc.ErrClosed):
		return concordv1.RelayFailureCode_RELAY_FAILURE_CODE_NOT_CONNECTED
	case errors.Is(err, rpc.ErrSlowConsumer):
		return concordv1.RelayFailureCode_RELAY_FAILURE_CODE_SLOW_CONSUMER
	case errors.Is(err, router.ErrBadEnvelope):
		return concordv1.RelayFailureCode_RELAY_FAILURE_CODE_BAD_ENVELOPE
	}
	return concordv1.RelayFailureCode_RELAY_FAILURE_CODE_INTERNAL
}

// eventToWire converts an ephemeral event for the relay stream.
func eventToWire(ev *registry.Event) *concordv1.RelayEvent {
	return &concordv1.RelayEvent{
		Id: ev.ID, Type: ev.Type, TimestampMs: ev.Timestamp, Source: ev.Source,
		Data: ev.Data, CausedBy: ev.CausedBy, AgentIds: ev.AgentIDs, ScopeIds: ev.ScopeIDs,
	}
}

// eventFromWire is the inverse of eventToWire. Position stays 0: message
// events are not part of the replicated event log.
func eventFromWire(e *concordv1.RelayEvent) registry.Event {
	ev := registry.Event{
		ID: e.GetId(), Type: e.GetType(), Timestamp: e.GetTimestampMs(), Source: e.GetSource(),
		CausedBy: e.GetCausedBy(), AgentIDs: e.GetAgentIds(), ScopeIDs: e.GetScopeIds(),
	}
	if len(e.GetData()) > 0 {
		ev.Data = e.GetData()
	}
	return ev
}
