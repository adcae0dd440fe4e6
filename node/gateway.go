package node

import (
	"context"
	"encoding/json"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
)

// fedGateway serves map/federation/connect and map/federation/route
// (mapsvc.Gateway) with the federation manager: its *CodeErrors become MAP
// errors, and a route's reply is deferred (rpc.Defer) until the message was
// delivered, so the gateway's connection serves its next request meanwhile.
type fedGateway struct {
	hook *lateFederation
	// timeout bounds a deferred route (its request context ends when the
	// handler returns).
	timeout func() (context.Context, context.CancelFunc)
}

func (g fedGateway) manager() (*federation.Manager, error) {
	if m := g.hook.m.Load(); m != nil {
		return m, nil
	}
	return nil, rpc.NewError(rpc.CodeFederationUnavailable, "Federation starting").WithDetails(map[string]any{"retryable": true})
}

func (g fedGateway) Connect(_ context.Context, c federation.GatewayCaller, params json.RawMessage) (any, error) {
	m, err := g.manager()
	if err != nil {
		return nil, err
	}
	res, cerr := m.GatewayConnect(c, params)
	if cerr != nil {
		return nil, router.FederationError(cerr)
	}
	return res, nil
}

func (g fedGateway) Route(ctx context.Context, c federation.GatewayCaller, params json.RawMessage) (any, error) {
	m, err := g.manager()
	if err != nil {
		return nil, err
	}
	answer := func(res *federation.GatewayRouteResult, cerr *federation.CodeError) (any, error) {
		if cerr != nil {
			return nil, router.FederationError(cerr)
		}
		return res, nil
	}
	if d, ok := rpc.Defer(ctx); ok {
		dctx, cancel := g.timeout()
		m.GatewayRoute(dctx, c, params, func(res *federation.GatewayRouteResult, cerr *federation.CodeError) {
			cancel()
			d.Reply(answer(res, cerr))
		})
		return nil, nil
	}
	type outcome struct {
		res  *federation.GatewayRouteResult
		cerr *federation.CodeError
	}
	ch := make(chan outcome, 1)
	m.GatewayRoute(ctx, c, params, func(res *federation.GatewayRouteResult, cerr *federation.CodeError) { ch <- outcome{res, cerr} })
	select {
	case o := <-ch:
		return answer(o.res, o.cerr)
	case <-ctx.Done():
		return nil, rpc.NewError(rpc.CodeFederationUnavailable, "Federation route interrupted: "+ctx.Err().Error())
	}
}
