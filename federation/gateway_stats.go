package federation

import (
	"sync"
	"sync/atomic"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// gatewayStats counts this node's SDK gateway traffic (metrics).
type gatewayStats struct {
	routedIn  atomic.Uint64 // map/federation/route calls accepted here
	routedOut atomic.Uint64 // messages this node handed to gateway sessions
	unbound   atomic.Uint64 // bindings this node (as leader) dropped
	mu        sync.Mutex
	refused   map[int]uint64 // route calls refused, by MAP error code
}

func (s *gatewayStats) refuse(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = map[int]uint64{}
	}
	s.refused[code]++
}

// GatewayStats is a snapshot of this node's SDK gateway counters.
type GatewayStats struct {
	RoutedIn, RoutedOut, Unbound uint64
	// Refused counts map/federation/route calls refused, by error code.
	Refused map[int]uint64
}

// Gateways lists the SDK gateway bindings: which gateway session serves
// which foreign system (replicated state, the same on every node).
func (m *Manager) Gateways() []*concordv1.FedGatewayBinding { return m.deps.State.Gateways() }

// GatewayStats returns this node's SDK gateway counters.
func (m *Manager) GatewayStats() GatewayStats {
	s := &m.gstats
	out := GatewayStats{RoutedIn: s.routedIn.Load(), RoutedOut: s.routedOut.Load(), Unbound: s.unbound.Load(), Refused: map[int]uint64{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, n := range s.refused {
		out.Refused[c] = n
	}
	return out
}
