package mapsvc

import (
	"context"
	"encoding/json"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/rpc"
)

// Gateway is what the MAP federation methods need from node: the
// federation manager, adapted to MAP errors (map-protocol.md §8). Route
// may defer its reply (rpc.Defer) until the message was delivered.
type Gateway interface {
	Connect(ctx context.Context, caller federation.GatewayCaller, params json.RawMessage) (any, error)
	Route(ctx context.Context, caller federation.GatewayCaller, params json.RawMessage) (any, error)
}

// gatewayCaller is the caller as federation sees it: its session, and the
// systems its credential lets it route for and to.
func gatewayCaller(cs *connState) federation.GatewayCaller {
	c := federation.GatewayCaller{SessionID: cs.sessionID, ParticipantID: cs.participantID, SessionEpoch: cs.epoch}
	if p := cs.principal; p != nil {
		c.Sources, c.Targets = p.GatewaySources, p.GatewayTargets
	}
	return c
}

func (s *Service) federationConnect(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	return s.cfg.Gateway.Connect(ctx, gatewayCaller(cs), raw)
}

func (s *Service) federationRoute(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	return s.cfg.Gateway.Route(ctx, gatewayCaller(cs), raw)
}
