package mapsvc

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ParticipantPermissions holds the capability ceilings the system set
// with map/permissions/update (node/acl, replicated in Raft).
type ParticipantPermissions interface {
	// Denied returns the capability flags ("lifecycle.canStop", ...)
	// withdrawn from a participant; nil when none.
	Denied(participantID string) []string
}

// effectiveCaps returns the session's capabilities narrowed by the
// participant's ceiling, read at every call so a change applies at once
// to open sessions on every node.
func (s *Service) effectiveCaps(cs *connState) Capabilities {
	caps := cs.caps
	if s.cfg.ParticipantPermissions == nil {
		return caps
	}
	flags := caps.flags()
	for _, f := range s.cfg.ParticipantPermissions.Denied(cs.participantID) {
		if p, ok := flags[f]; ok {
			*p = false
		}
	}
	return caps
}

// permissionsUpdate serves map/permissions/update (system participants
// only; the SDK's PermissionsUpdateRequest): {clientId, permissions:
// Partial<ParticipantCapabilities>}. A flag set to false is withdrawn
// from every session of that participant; true gives it back, up to what
// its credential and participant type grant (the system is the ceiling,
// never a source of new rights). Answers {success, effectivePermissions}
// for the participant's current sessions' type (client when none).
func (s *Service) permissionsUpdate(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	if s.cfg.ParticipantPermissions == nil {
		return nil, rpc.NewError(rpc.CodeMethodNotFound, "").WithDetails(map[string]any{"method": "map/permissions/update"})
	}
	p := decodeParams(raw)
	pid := p.reqStr("clientId")
	perms := p.object("permissions")
	if perms == nil && p.err() == nil {
		p.fail("permissions", "is required")
	}
	var deny, allow []string
	if p.err() == nil {
		var groups map[string]map[string]bool
		if json.Unmarshal(perms, &groups) != nil {
			p.fail("permissions", "must be an object of capability groups of booleans")
		}
		for g, flags := range groups {
			for f, on := range flags {
				name := g + "." + f
				if !KnownCapability(name) {
					p.fail("permissions."+name, "unknown capability")
					break
				}
				if on {
					allow = append(allow, name)
				} else {
					deny = append(deny, name)
				}
			}
		}
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	sort.Strings(deny)
	sort.Strings(allow)
	if _, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE, &concordv1.AclPermissionsUpdate{
		ParticipantId: pid, Deny: deny, Allow: allow, TimestampMs: s.now(), UpdatedBy: cs.participantID,
	}); err != nil {
		return nil, err
	}
	s.log.Info("participant permissions updated", "participant_id", pid, "deny", deny, "allow", allow, "by", cs.participantID)
	ptype := TypeClient
	for _, sess := range s.reg.Sessions() {
		if sess.ParticipantID == pid {
			ptype = sess.ParticipantType
			break
		}
	}
	eff := s.effectiveCaps(&connState{participantID: pid, caps: defaultCapabilities(ptype, s.cfg.Fanout != nil)})
	return map[string]any{"success": true, "effectivePermissions": eff}, nil
}
