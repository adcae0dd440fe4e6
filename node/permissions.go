package node

import (
	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
)

// sendPermissions is the router's view of the agent permission layer
// (node/access): canMessage of the sending agents and acceptsFrom of the
// recipient, decided on this node's replica.
type sendPermissions struct {
	reg      *registry.State
	systemID string
}

var _ router.Permissions = sendPermissions{}

// sender maps a router sender to access's: the sending agent, or every
// agent its session owns when it names none (the most restrictive wins).
func (p sendPermissions) sender(from router.Sender) access.Sender {
	s := access.Sender{ParticipantID: from.ParticipantID, ParticipantType: from.ParticipantType, SystemID: p.systemID}
	if from.AgentID != "" {
		s.Agents = []string{from.AgentID}
	} else if from.SessionID != "" {
		s.Agents = p.reg.SessionAgentIDs(from.SessionID)
	}
	return s
}

func (p sendPermissions) SenderRestricted(from router.Sender) bool {
	return access.SenderRestricted(p.reg, p.sender(from))
}

func (p sendPermissions) MayMessage(from router.Sender, to *registry.Agent) bool {
	return access.MayMessage(p.reg, p.sender(from), to)
}

func (p sendPermissions) AcceptsFromSystem(system string, to *registry.Agent) bool {
	return access.AcceptsFromSystem(p.reg, to, system)
}

// RoleRestricted implements router.RolePermissions.
func (p sendPermissions) RoleRestricted(role string) bool {
	return len(p.reg.RolePermissions(role)) > 0
}

func (p sendPermissions) MaySendToScope(from router.Sender, sc *registry.Scope) bool {
	return access.MaySendToScope(p.reg, p.sender(from), sc)
}
