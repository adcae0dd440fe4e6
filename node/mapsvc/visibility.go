package mapsvc

import (
	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/registry"
)

// Visibility (map-protocol.md §7) in list, get, members and graph: hidden
// agents and scopes are missing from lists and answered 2001/2002 by get,
// so their existence does not leak. The rules live in node/access, shared
// with the fan-out.

func viewerOf(cs *connState) access.Viewer {
	return access.Viewer{ParticipantID: cs.participantID, ParticipantType: cs.participantType}
}

func (s *Service) agentVisible(cs *connState, a *registry.Agent) bool {
	return access.AgentVisible(s.reg, viewerOf(cs), a)
}

func (s *Service) scopeVisible(cs *connState, sc *registry.Scope) bool {
	return access.ScopeVisible(s.reg, viewerOf(cs), sc)
}

// visibleAgents keeps the agents cs may see (a new slice).
func (s *Service) visibleAgents(cs *connState, in []registry.Agent) []registry.Agent {
	out := make([]registry.Agent, 0, len(in))
	for i := range in {
		if s.agentVisible(cs, &in[i]) {
			out = append(out, in[i])
		}
	}
	return out
}

// visibleAgentIDs keeps the agent ids cs may see.
func (s *Service) visibleAgentIDs(cs *connState, ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if a, ok := s.reg.Agent(id); !ok || s.agentVisible(cs, &a) {
			out = append(out, id)
		}
	}
	return out
}
