package federation

import (
	"context"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// releaseGateways, on the leader, drops the bindings whose gateway
// session has ended (closed by map/disconnect, or expired after its
// socket dropped and it did not resume): until then
// a message to that system answers the retryable 5000 "gateway not
// connected", after it 5001 like any unknown system. It runs with the
// map link holder check, so a binding outlives its session by at most
// Config.Ping. The leader decides (as for map link holders) so that one
// node, not every node, proposes each unbind.
func (m *Manager) releaseGateways(ctx context.Context) {
	if m.deps.SessionLive == nil || !m.deps.IsLeader() {
		return
	}
	quote := m.quoteSessionEpochs(ctx)
	for _, b := range m.deps.State.Gateways() {
		epoch, live := m.deps.SessionLive(b.GetSessionId())
		if live {
			continue
		}
		un := &concordv1.FedGatewayUnbind{SystemId: b.GetSystemId(), SessionId: b.GetSessionId()}
		if quote {
			// Should the session resume before this commits, its binding
			// serves it again and stays.
			un.SessionEpoch = epoch
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		_, _, err := m.deps.Store.Apply(cctx, concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_UNBIND, un)
		cancel()
		if err != nil {
			m.log.Debug("release a gateway binding", "peer", b.GetSystemId(), "session_id", b.GetSessionId(), "err", err)
			continue
		}
		m.gstats.unbound.Add(1)
		m.log.Info("gateway unbound: its session ended", "peer", b.GetSystemId(), "session_id", b.GetSessionId())
	}
}
