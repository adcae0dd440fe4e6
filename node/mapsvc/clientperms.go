package mapsvc

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ParticipantPermissions holds the capability ceilings the system set
// with map/permissions/update (node/acl, replicated in Raft).
type ParticipantPermissions interface {
	// Denied returns the capability flags ("lifecycle.canStop", ...) and
	// ("actions.sendMessages", ...) withdrawn from a participant; nil
	// when none.
	Denied(participantID string) []string
	// Limits returns the participant's client-permission limits by name
	// ("messagesPerMinute", ...); nil when none.
	Limits(participantID string) map[string]int64
	// Visibility returns the participant's client visibility; nil when
	// it restricts nothing.
	Visibility(participantID string) *access.ClientVisibility
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
	var limits map[string]int64
	var visibility json.RawMessage
	if p.err() == nil {
		var groups map[string]json.RawMessage
		if json.Unmarshal(perms, &groups) != nil {
			p.fail("permissions", "must be an object of capability groups of booleans")
		}
		if raw, ok := groups["limits"]; ok {
			delete(groups, "limits")
			limits = parseLimits(p, raw)
		}
		if raw, ok := groups["visibility"]; ok {
			delete(groups, "visibility")
			var fe *access.FieldError
			if _, err := access.ParseClientVisibility(raw); errors.As(err, &fe) {
				p.fail(strings.TrimSuffix("permissions.visibility."+fe.Field, "."), fe.Reason)
			}
			visibility = raw
		}
		for g, rawFlags := range groups {
			var flags map[string]bool
			if json.Unmarshal(rawFlags, &flags) != nil {
				p.fail("permissions."+g, "must be an object of booleans")
				break
			}
			for f, on := range flags {
				name := g + "." + f
				if !KnownPermission(name) {
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
	upd := &concordv1.AclPermissionsUpdate{
		ParticipantId: pid, Deny: deny, Allow: allow, TimestampMs: s.now(), UpdatedBy: cs.participantID, Limits: limits,
		Visibility: visibility,
	}
	// A late commit (the client told the outcome is unknown, then resumed
	// elsewhere and set what it wants now) is refused rather than applied
	// over the newer update.
	upd.OriginSessionId, upd.OriginSessionEpoch = s.originAt(ctx, cs, registry.FSMLevelModuleSessionWrites)
	// What the acl module's apply will check, against this replica first
	// (on any node: epochs only grow, so a session this replica shows
	// moved on has moved on), so a refused update writes nothing.
	if err := s.reg.CheckOrigin(upd.OriginSessionId, upd.OriginSessionEpoch); err != nil {
		return nil, err
	}
	// propose, not proposeFenced: the answer reads the update back from
	// this replica, so it waits for the local apply.
	if _, err := s.propose(ctx, concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE, upd); err != nil {
		return nil, err
	}
	s.log.Info("participant permissions updated", "participant_id", pid, "deny", deny, "allow", allow, "limits", limits, "by", cs.participantID)
	ptype := TypeClient
	for _, sess := range s.reg.Sessions() {
		if sess.ParticipantID == pid {
			ptype = sess.ParticipantType
			break
		}
	}
	eff := s.effectiveCaps(&connState{participantID: pid, caps: defaultCapabilities(ptype, s.cfg.Fanout != nil)})
	return map[string]any{"success": true, "effectivePermissions": eff, "clientPermissions": s.clientPermissionsOf(pid)}, nil
}

// parseLimits reads permissions.limits: {name: n} sets a limit (0 to
// MaxLimit), {name: null} clears it (sent as -1 in the Raft command).
func parseLimits(p *params, raw json.RawMessage) map[string]int64 {
	var in map[string]*int64
	if json.Unmarshal(raw, &in) != nil {
		p.fail("permissions.limits", "must be an object of integers or null")
		return nil
	}
	out := make(map[string]int64, len(in))
	for name, v := range in {
		switch {
		case !KnownLimit(name):
			p.fail("permissions.limits."+name, "unknown limit")
		case v == nil:
			out[name] = -1
		case *v < 0 || *v > MaxLimit:
			p.fail("permissions.limits."+name, "must be between 0 and 2147483647, or null to clear")
		default:
			out[name] = *v
		}
	}
	return out
}

// clientPermissionsOf is the participant's client permissions as the
// SDK shapes them: every action with whether it is allowed, and the
// limits set.
func (s *Service) clientPermissionsOf(pid string) map[string]any {
	denied := s.cfg.ParticipantPermissions.Denied(pid)
	actions := map[string]bool{}
	for _, a := range methodActions {
		actions[a] = !slices.Contains(denied, "actions."+a)
	}
	limits := s.cfg.ParticipantPermissions.Limits(pid)
	if limits == nil {
		limits = map[string]int64{}
	}
	var vis any = access.ClientVisibility{}
	if v := s.cfg.ParticipantPermissions.Visibility(pid); v != nil {
		vis = *v
	}
	return map[string]any{"actions": actions, "limits": limits, "visibility": vis}
}
