package mapsvc

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// scopesList serves map/scopes/list {parent?}.
func (s *Service) scopesList(ctx context.Context, _ *rpc.Conn, _ *connState, raw json.RawMessage) (any, error) {
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
		if !hasParent || sc.Parent == parent {
			out = append(out, sc)
		}
	}
	return map[string]any{"scopes": out}, nil
}

// scopesGet serves map/scopes/get {scopeId}.
func (s *Service) scopesGet(ctx context.Context, _ *rpc.Conn, _ *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	id := p.reqStr("scopeId")
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	sc, ok := s.reg.Scope(id)
	if !ok {
		return nil, rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+id)
	}
	return map[string]any{"scope": sc}, nil
}

// scopesMembers serves map/scopes/members {scopeId, limit?, cursor?}.
func (s *Service) scopesMembers(ctx context.Context, _ *rpc.Conn, _ *connState, raw json.RawMessage) (any, error) {
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
	if !ok {
		return nil, rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+id)
	}
	members, next := paginate(sc.Members, func(m *string) string { return *m }, limit, cursor)
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
	res, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE, &concordv1.ScopeCreateRequest{
		Meta: s.meta(cs.participantID, 1), Scope: rec,
	})
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
	res, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE, &concordv1.ScopeDeleteRequest{
		Meta: s.meta(cs.participantID, 1), ScopeId: id,
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"deleted": true, "scope": res.(registry.Scope)}, nil
}

// scopesJoin serves map/scopes/join {scopeId, agentId}. The caller must
// control the agent (mayControl); joinPolicy is recorded but not enforced.
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
	if err := s.mayControl(cs, agentID); err != nil {
		return nil, err
	}
	var res any
	var err error
	if join {
		res, err = s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN, &concordv1.ScopeJoinRequest{
			Meta: s.meta(cs.participantID, 1), ScopeId: scopeID, AgentId: agentID,
		})
	} else {
		res, err = s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE, &concordv1.ScopeLeaveRequest{
			Meta: s.meta(cs.participantID, 2), ScopeId: scopeID, AgentId: agentID,
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
