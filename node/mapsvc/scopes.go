package mapsvc

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// scopesList serves map/scopes/list {parent?}.
func (s *Service) scopesList(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	parent, hasParent := p.optStr("parent")
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	out := []registry.Scope{}
	for _, sc := range s.reg.Scopes() {
		if (!hasParent || sc.Parent == parent) && s.scopeVisible(cs, &sc) {
			out = append(out, sc)
		}
	}
	return map[string]any{"scopes": out}, nil
}

// scopesGet serves map/scopes/get {scopeId}.
func (s *Service) scopesGet(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	id := p.reqStr("scopeId")
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	sc, ok := s.reg.Scope(id)
	if !ok || !s.scopeVisible(cs, &sc) {
		return nil, rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+id)
	}
	return map[string]any{"scope": sc}, nil
}

// scopesMembers serves map/scopes/members {scopeId, limit?, cursor?}.
func (s *Service) scopesMembers(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	id := p.reqStr("scopeId")
	limit, cursor := s.page(p)
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	sc, ok := s.reg.Scope(id)
	if !ok || !s.scopeVisible(cs, &sc) {
		return nil, rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+id)
	}
	members, next := paginate(s.visibleAgentIDs(cs, sc.Members), func(m *string) string { return *m }, limit, cursor)
	out := map[string]any{"members": members}
	if next != "" {
		out["nextCursor"] = next
	}
	return out, nil
}

// scopesCreate serves map/scopes/create. persistent defaults to true and
// autoDelete to false (map-protocol.md §5.3); enums follow the schema.
func (s *Service) scopesCreate(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	rec := &concordv1.ScopeRecord{
		Id:                p.str("scopeId"),
		Name:              p.str("name"),
		Description:       p.str("description"),
		Parent:            p.str("parent"),
		JoinPolicy:        p.enum("joinPolicy", "open", "invite", "role", "system"),
		AutoJoinRoles:     p.strs("autoJoinRoles"),
		Visibility:        p.enum("visibility", "public", "members", "system"),
		MessageVisibility: p.enum("messageVisibility", "public", "members", "system"),
		SendPolicy:        p.enum("sendPolicy", "members", "any"),
		Persistent:        true,
		Metadata:          p.object("metadata"),
	}
	if v, ok := p.boolean("persistent"); ok {
		rec.Persistent = v
	}
	rec.AutoDelete, _ = p.boolean("autoDelete")
	if err := p.err(); err != nil {
		return nil, err
	}
	if rec.Id == "" {
		rec.Id = "scope-" + strings.ToLower(s.newID())
	}
	rec.OwnerId = cs.participantID
	req := &concordv1.ScopeCreateRequest{Meta: s.meta(cs.participantID, 1), Scope: rec}
	req.OriginSessionId, req.OriginSessionEpoch = s.origin(ctx, cs)
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE, req)
	if err != nil {
		return nil, err
	}
	return map[string]any{"scope": res.(registry.Scope)}, nil
}

// scopesDelete serves map/scopes/delete {scopeId}.
func (s *Service) scopesDelete(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	id := p.reqStr("scopeId")
	if err := p.err(); err != nil {
		return nil, err
	}
	if sc, ok := s.reg.Scope(id); ok && !s.managesScope(cs, &sc) {
		return nil, permissionDenied("scope " + id + " belongs to another participant")
	}
	req := &concordv1.ScopeDeleteRequest{Meta: s.meta(cs.participantID, 1), ScopeId: id}
	req.OriginSessionId, req.OriginSessionEpoch = s.origin(ctx, cs)
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE, req)
	if err != nil {
		return nil, err
	}
	return map[string]any{"deleted": true, "scope": res.(registry.Scope)}, nil
}

// scopesJoin serves map/scopes/join {scopeId, agentId} under the scope's
// joinPolicy (see mayJoin).
func (s *Service) scopesJoin(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	return s.membership(ctx, cs, raw, true)
}

// scopesLeave serves map/scopes/leave {scopeId, agentId}.
func (s *Service) scopesLeave(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	return s.membership(ctx, cs, raw, false)
}

func (s *Service) membership(ctx context.Context, cs *connState, raw json.RawMessage, join bool) (any, error) {
	p := decodeParams(raw)
	scopeID := p.reqStr("scopeId")
	agentID := p.reqStr("agentId")
	if err := p.err(); err != nil {
		return nil, err
	}
	if err := s.mayChangeMembership(cs, scopeID, agentID, join); err != nil {
		return nil, err
	}
	var res any
	var err error
	osid, oep := s.origin(ctx, cs)
	if join {
		res, err = s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN, &concordv1.ScopeJoinRequest{
			Meta: s.meta(cs.participantID, 1), ScopeId: scopeID, AgentId: agentID, OriginSessionId: osid, OriginSessionEpoch: oep,
		})
	} else {
		res, err = s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE, &concordv1.ScopeLeaveRequest{
			Meta: s.meta(cs.participantID, 2), ScopeId: scopeID, AgentId: agentID, OriginSessionId: osid, OriginSessionEpoch: oep,
		})
	}
	if err != nil {
		return nil, err
	}
	mr := res.(registry.MembershipResult)
	key := "left"
	if join {
		key = "joined"
	}
	return map[string]any{key: true, "scope": mr.Scope, "agent": mr.Agent}, nil
}

// managesScope: system participants and the scope's owner manage it (a
// scope created before owners were recorded has none: only system).
func (s *Service) managesScope(cs *connState, sc *registry.Scope) bool {
	return cs.participantType == TypeSystem || (sc.OwnerID != "" && sc.OwnerID == cs.participantID)
}

// mayChangeMembership applies the join policy (map-protocol.md §7):
//   - open: whoever controls the agent (owner or ancestor's owner);
//   - invite: only the scope's owner (or system) adds agents;
//   - role: the agent's role must be one of autoJoinRoles, or the owner adds it;
//   - system: system participants only.
//
// Leaving needs control of the agent or management of the scope. Unknown
// scopes and agents pass here and fail with 2002/2001 in the registry; a
// hidden scope answers 2002 like an unknown one.
func (s *Service) mayChangeMembership(cs *connState, scopeID, agentID string, join bool) error {
	sc, ok := s.reg.Scope(scopeID)
	if !ok {
		return s.mayControl(cs, agentID)
	}
	if !s.scopeVisible(cs, &sc) {
		return rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+scopeID)
	}
	manager := s.managesScope(cs, &sc)
	if !join {
		if manager {
			return nil
		}
		return s.mayControl(cs, agentID)
	}
	switch sc.JoinPolicy {
	case "invite":
		if !manager {
			return permissionDenied("scope " + scopeID + " is invite-only: its owner adds members")
		}
		return nil
	case "system":
		if cs.participantType != TypeSystem {
			return permissionDenied("only system participants add members to scope " + scopeID)
		}
		return nil
	case "role":
		if manager {
			return nil
		}
		if a, ok := s.reg.Agent(agentID); ok && !slices.Contains(sc.AutoJoinRoles, a.Role) {
			return permissionDenied("agent role " + a.Role + " may not join scope " + scopeID)
		}
	}
	return s.mayControl(cs, agentID)
}
