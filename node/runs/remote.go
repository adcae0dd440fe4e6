package runs

import (
	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Participants of other systems (federation.md §5). A participant id of
// the form "<system>:agent:<id>" names agent id of a linked system: the
// run still lives here, its tasks travel over the link to {system, agent}
// and the agent answers the runs service through the link
// ("<home>:agent:concord.runs", the from of the task it was sent). The
// home system's own id in that form names a local agent.

// RemoteDirectory is the replicated federation state the start check
// reads: *federation.State satisfies it.
type RemoteDirectory interface {
	// Link returns the link to a system, if there is one.
	Link(system string) (*concordv1.FedLink, bool)
	// RemoteAgent looks an agent up in the directory imported from system.
	RemoteAgent(system, id string) (*concordv1.FedRemoteAgent, bool)
}

// participant is where a participant id lives: local (system empty, id the
// local agent id) or agent id of another system.
type participant struct {
	system, id string
}

func (s *Service) locate(pid string) participant {
	sys, id, ok := federation.ParseRemoteID(pid)
	switch {
	case !ok:
		return participant{id: pid}
	case sys == s.cfg.SystemID:
		return participant{id: id}
	}
	return participant{system: sys, id: id}
}

// checkAgents refuses a start naming an agent that does not exist, before
// anything is proposed: a local one not registered (2001), one of another
// system without a link to it (5001) or not in the directory imported from
// it (2001). details.agents lists every unknown agent, in request order.
func (s *Service) checkAgents(ids []string) error {
	var missing []string
	noLink := ""
	for _, pid := range ids {
		p := s.locate(pid)
		if p.system == "" {
			if _, ok := s.cfg.Agents.Agent(p.id); !ok {
				missing = append(missing, pid)
			}
			continue
		}
		if s.cfg.Remote == nil {
			noLink = p.system
			break
		}
		if _, ok := s.cfg.Remote.Link(p.system); !ok {
			noLink = p.system
			break
		}
		if _, ok := s.cfg.Remote.RemoteAgent(p.system, p.id); !ok {
			missing = append(missing, pid)
		}
	}
	if noLink != "" {
		return rpc.NewError(rpc.CodeFederationSystemNotFound, "Federation system not found: no link to "+noLink+" for its participants").
			WithDetails(map[string]any{"systemId": noLink})
	}
	if len(missing) > 0 {
		msg := "Agent not found: " + missing[0]
		if p := s.locate(missing[0]); p.system != "" {
			msg += " (not in the directory imported from " + p.system + ")"
		}
		return rpc.NewError(rpc.CodeAgentNotFound, msg).WithDetails(map[string]any{"agents": missing})
	}
	return nil
}

// appendAddress appends the address a task for pid is sent to: {agent}
// for a local participant, {system, agent} (routed over the link) for a
// participant of another system.
func appendAddress(b []byte, pid string) []byte {
	sys, id, ok := federation.ParseRemoteID(pid)
	if !ok {
		b = append(b, `{"agent":`...)
		b = jsonkit.AppendString(b, pid)
		return append(b, '}')
	}
	b = append(b, `{"system":`...)
	b = jsonkit.AppendString(b, sys)
	b = append(b, `,"agent":`...)
	b = jsonkit.AppendString(b, id)
	return append(b, '}')
}

// ownsRemote reports whether from may answer for participant p of another
// system: only that system's agent, whose send crossed the link
// (router.Sender.SourceSystem), never a local session.
func ownsRemote(from router.Sender, p participant) bool {
	return from.SourceSystem != "" && from.SourceSystem == p.system && from.AgentID == federation.RemoteID(p.system, p.id)
}
