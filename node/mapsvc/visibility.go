package mapsvc

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Visibility (map-protocol.md §7) in list, get, members and graph: hidden
// agents and scopes are missing from lists and answered 2001/2002 by get,
// so their existence does not leak. The rules live in node/access, shared
// with the fan-out.

func (s *Service) viewerOf(cs *connState) access.Viewer {
	v := access.Viewer{ParticipantID: cs.participantID, ParticipantType: cs.participantType,
		Agents: s.reg.SessionAgentIDs(cs.sessionID)}
	if pp := s.cfg.ParticipantPermissions; pp != nil {
		v.Client = pp.Visibility(cs.participantID)
	}
	return v.WithLayer(s.reg)
}

func (s *Service) agentVisible(cs *connState, a *registry.Agent) bool {
	return access.AgentVisible(s.reg, s.viewerOf(cs), a)
}

func (s *Service) scopeVisible(cs *connState, sc *registry.Scope) bool {
	return access.ScopeVisible(s.reg, s.viewerOf(cs), sc)
}

// visibleAgents keeps the agents cs may see (a new slice).
func (s *Service) visibleAgents(cs *connState, in []registry.Agent) []registry.Agent {
	v := s.viewerOf(cs)
	out := make([]registry.Agent, 0, len(in))
	for i := range in {
		if access.AgentVisible(s.reg, v, &in[i]) {
			out = append(out, in[i])
		}
	}
	return out
}

// visibleAgentIDs keeps the agent ids cs may see.
func (s *Service) visibleAgentIDs(cs *connState, ids []string) []string {
	v := s.viewerOf(cs)
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if a, ok := s.reg.Agent(id); !ok || access.AgentVisible(s.reg, v, &a) {
			out = append(out, id)
		}
	}
	return out
}

// structureEdges applies the viewer's canSee.structure to graph edges:
// none drops them all, local keeps those touching its own agents.
func (s *Service) structureEdges(cs *connState, edges []edge) []edge {
	v := s.viewerOf(cs)
	switch access.StructureOf(s.reg, v) {
	case "none":
		return []edge{}
	case "local":
		out := []edge{}
		for _, e := range edges {
			if slices.Contains(v.Agents, e.From) || slices.Contains(v.Agents, e.To) {
				out = append(out, e)
			}
		}
		return out
	}
	return edges
}

// checkPermissionOverrides validates a permissionOverrides object
// (node/access), failing p with the offending field.
func checkPermissionOverrides(p *params, raw json.RawMessage) {
	if raw == nil || p.err() != nil {
		return
	}
	if _, err := access.ParsePermissions(raw); err != nil {
		field := "permissionOverrides"
		var fe *access.FieldError
		if errors.As(err, &fe) && fe.Field != "" {
			field += "." + fe.Field
			p.fail(field, fe.Reason)
			return
		}
		p.fail(field, err.Error())
	}
}

// mayChangePermissions: an agent's permissionOverrides are changed at run
// time by a system participant or by the owner of one of its ancestors (a
// parent narrows what it spawned); an agent's own owner cannot widen its
// own permissions (map-protocol.md §7, escalation rules). 1003 otherwise.
func (s *Service) mayChangePermissions(cs *connState, agentID string) error {
	if cs.participantType == TypeSystem {
		return nil
	}
	a, ok := s.reg.Agent(agentID)
	if !ok {
		return nil // 2001 from the registry
	}
	for depth := 0; a.Parent != "" && depth < 64; depth++ {
		if a, ok = s.reg.Agent(a.Parent); !ok {
			break
		}
		if a.OwnerID == cs.participantID {
			return nil
		}
	}
	return permissionDenied("permissionOverrides of agent " + agentID + " are changed by a system participant or the owner of an ancestor")
}

// inheritPermissions applies "an agent cannot grant rights it does not
// hold" to a registration with a parent: a child of a restricted parent
// gets the parent's overrides, and may not name its own (only a system
// participant may). Unrestricted parents impose nothing.
func (s *Service) inheritPermissions(ctx context.Context, cs *connState, rec *concordv1.AgentRecord) error {
	if rec.Parent == "" || cs.participantType == TypeSystem {
		return nil
	}
	parent, ok := s.reg.Agent(rec.Parent)
	if !ok {
		// On a follower the parent may have been registered through
		// another node and not be applied here yet: catch up, or its
		// restriction would be missed. (The leader's replica has every
		// registration that answered; followers already log refusals.)
		if s.cfg.IsLeader() {
			return nil // the registry answers for an unknown parent
		}
		if err := s.catchUp(ctx); err != nil {
			return err
		}
		if parent, ok = s.reg.Agent(rec.Parent); !ok {
			return nil // the registry answers for an unknown parent
		}
	}
	if pp := access.EffectivePermissions(s.reg, &parent); pp.Unrestricted() {
		return nil
	}
	if rec.PermissionOverrides != nil && string(rec.PermissionOverrides) != string(parent.PermissionOverrides) {
		return permissionDenied("parent " + parent.ID + " is restricted: its children inherit its permissionOverrides")
	}
	rec.PermissionOverrides = parent.PermissionOverrides
	return nil
}

// catchUp brings the local replica past everything committed before the
// call: a no-op through the leader, applied here (WaitApplied).
func (s *Service) catchUp(ctx context.Context) error {
	_, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "mapsvc catch-up: " + s.cfg.NodeID})
	return err
}
