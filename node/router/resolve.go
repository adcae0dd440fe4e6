package router

import (
	"slices"
	"strings"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// Failure reasons reported in SendResult.Failed and message_failed events.
const (
	reasonAgentNotFound = "agent_not_found"
	reasonOrphaned      = "orphaned"
	reasonNotConnected  = "not_connected"
	reasonSlowConsumer  = "slow_consumer"
	reasonNoRelay       = "no_relay"
	reasonRelayFailed   = "relay_failed"
	reasonNotPermitted  = "permission_denied"
)

// recipient is one resolved target: an agent, or a participant session
// (addressed by {participant} / {participants}).
type recipient struct {
	agentID       string // "" for a session recipient
	participantID string
	sessionID     string
	homeNode      string
	reason        string // non-empty: known undeliverable before trying
	// restricted: the agent has permissionOverrides (its acceptsFrom may
	// refuse the sender; permit checks it).
	restricted bool
	role       string // the agent's role, whose rolePermissions may restrict it too
}

// RolePermissions is the optional part of Permissions that knows the
// server's rolePermissions: an agent whose role has some is restricted
// without overrides of its own.
type RolePermissions interface {
	RoleRestricted(role string) bool
}

// recipientRestricted reports whether rc's own permissions may refuse a
// sender: overrides, or permissions of its role.
func (r *Router) recipientRestricted(rc *recipient) bool {
	if rc.restricted {
		return true
	}
	rp, ok := r.perms.(RolePermissions)
	return ok && rc.role != "" && rp.RoleRestricted(rc.role)
}

// label is the id reported in delivered / failed.
func (rc recipient) label() string {
	if rc.agentID != "" {
		return rc.agentID
	}
	return rc.participantID
}

func agentRecipient(a *registry.Agent) recipient {
	rc := recipient{agentID: a.ID, sessionID: a.SessionID, homeNode: a.HomeNode, restricted: len(a.PermissionOverrides) > 0, role: a.Role}
	switch {
	case a.OwnerID == "":
		rc.reason = reasonOrphaned
	case a.HomeNode == "" || a.SessionID == "":
		rc.reason = reasonNotConnected
	}
	return rc
}

func sessionRecipient(s *registry.Session) recipient {
	rc := recipient{participantID: s.ParticipantID, sessionID: s.ID, homeNode: s.HomeNode}
	if !s.Connected || s.HomeNode == "" {
		rc.reason = reasonNotConnected
	}
	return rc
}

// resolution is the outcome of resolving an address against this
// system's registry: agents and participant sessions, each delivered to its
// connection here or handed to Peers for its home node.
type resolution struct {
	recipients []recipient
	scopeID    string // the addressed scope, for events
	system     bool   // {system:true}: the router itself is the recipient
	// fed is set instead of recipients for an agent or scope of another
	// system: the send goes to that system's link (federation.go).
	fed *fedTarget
}

// hasRemote reports whether a deliverable recipient is homed on a node
// other than self (a message the relay will carry).
func (res resolution) hasRemote(self string) bool {
	for _, rc := range res.recipients {
		if rc.reason == "" && rc.homeNode != self {
			return true
		}
	}
	return false
}

// resolve turns an address into recipients. The sender is never its own
// recipient for group forms (scope, role, broadcast, participants).
func (r *Router) resolve(from Sender, a address) (resolution, error) {
	switch a.kind {
	case addrString:
		return r.resolveString(from, a.id)
	case addrAgent:
		if _, ok := r.reg.Agent(a.id); !ok {
			// {agent: "dc2:agent:bob"}: the SDK's AgentConnection.reply()
			// addresses a remote sender this way.
			if i := strings.Index(a.id, ":agent:"); i > 0 && len(a.id) > i+len(":agent:") {
				return r.resolveFederated(from, a.id[:i], a.id[i+len(":agent:"):], "")
			}
		}
		return r.resolveAgent(a.id)
	case addrAgents:
		return r.resolveAgents(a.ids)
	case addrScope:
		return r.resolveScope(from, a.id)
	case addrRole:
		return r.resolveRole(from, a.role, a.within)
	case addrParent, addrChildren, addrAncestors, addrDescendants, addrSiblings:
		return r.resolveRelative(from, a)
	case addrBroadcast:
		agents := r.reg.AgentsWhere(func(ag *registry.Agent) bool { return ag.ID != from.AgentID })
		return group(agentRecipients(agents), "")
	case addrSystem:
		return resolution{system: true}, nil
	case addrFederated:
		return r.resolveFederated(from, a.id, a.agent, a.scope)
	case addrParticipant:
		return r.resolveParticipant(a.id)
	case addrParticipants:
		return r.resolveParticipants(from, a.which)
	}
	return resolution{}, rpc.InvalidParams("to", "unsupported address form")
}

// resolveString handles the string shorthand: an agent id, "agent:<id>",
// "scope:<id>", or a federated "sysId:agent:<id>". An exact agent id wins
// over a prefix reading; when both readings name different existing
// targets the address is ambiguous.
func (r *Router) resolveString(from Sender, s string) (resolution, error) {
	exact, exactOK := r.reg.Agent(s)
	var prefixed bool
	var alt resolution
	var altErr error
	switch {
	case strings.HasPrefix(s, "agent:") && len(s) > len("agent:"):
		prefixed = true
		alt, altErr = r.resolveAgent(s[len("agent:"):])
	case strings.HasPrefix(s, "scope:") && len(s) > len("scope:"):
		prefixed = true
		alt, altErr = r.resolveScope(from, s[len("scope:"):])
	case strings.Contains(s, ":agent:") || strings.Contains(s, ":scope:"):
		if exactOK {
			return resolution{recipients: []recipient{agentRecipient(&exact)}}, nil
		}
		if i := strings.Index(s, ":agent:"); i > 0 && len(s) > i+len(":agent:") {
			return r.resolveFederated(from, s[:i], s[i+len(":agent:"):], "")
		}
		if i := strings.Index(s, ":scope:"); i > 0 && len(s) > i+len(":scope:") {
			return r.resolveFederated(from, s[:i], "", s[i+len(":scope:"):])
		}
		return resolution{}, agentNotFound(s)
	}
	switch {
	case exactOK && prefixed && altErr == nil:
		return resolution{}, rpc.NewError(rpc.CodeAddressAmbiguous, "Address ambiguous: "+s+" names an agent and, read as a prefixed address, another target").
			WithDetails(map[string]any{"address": s})
	case exactOK:
		return resolution{recipients: []recipient{agentRecipient(&exact)}}, nil
	case prefixed:
		return alt, altErr
	}
	return resolution{}, agentNotFound(s)
}

func (r *Router) resolveAgent(id string) (resolution, error) {
	a, ok := r.reg.Agent(id)
	if !ok {
		return resolution{}, agentNotFound(id)
	}
	return resolution{recipients: []recipient{agentRecipient(&a)}}, nil
}

// resolveAgents resolves {agents:[...]}: unknown ids become failed
// recipients; when none of them exists the send is AGENT_NOT_FOUND.
func (r *Router) resolveAgents(ids []string) (resolution, error) {
	out := make([]recipient, 0, len(ids))
	var missing []string
	for _, id := range ids {
		if a, ok := r.reg.Agent(id); ok {
			out = append(out, agentRecipient(&a))
		} else {
			missing = append(missing, id)
			out = append(out, recipient{agentID: id, reason: reasonAgentNotFound})
		}
	}
	if len(missing) == len(ids) {
		return resolution{}, rpc.NewError(rpc.CodeAgentNotFound, "Agent not found").
			WithDetails(map[string]any{"agentIds": missing})
	}
	return resolution{recipients: dedup(out)}, nil
}

// resolveScope resolves {scope}: every member but the sender, subject to
// the scope's sendPolicy ("members": only a member agent may send).
func (r *Router) resolveScope(from Sender, id string) (resolution, error) {
	sc, ok := r.reg.Scope(id)
	if !ok {
		return resolution{}, rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+id).
			WithDetails(map[string]any{"scopeId": id})
	}
	if sc.SendPolicy == "members" && (from.AgentID == "" || !slices.Contains(sc.Members, from.AgentID)) {
		return resolution{}, rpc.NewError(rpc.CodePermissionDenied, "Only members may send to scope "+id).
			WithDetails(map[string]any{"scopeId": id, "sendPolicy": sc.SendPolicy})
	}
	out := make([]recipient, 0, len(sc.Members))
	for _, m := range sc.Members {
		if m == from.AgentID {
			continue
		}
		if a, ok := r.reg.Agent(m); ok {
			out = append(out, agentRecipient(&a))
		}
	}
	return group(out, id)
}

func (r *Router) resolveRole(from Sender, role, within string) (resolution, error) {
	var members []string
	if within != "" {
		sc, ok := r.reg.Scope(within)
		if !ok {
			return resolution{}, rpc.NewError(rpc.CodeScopeNotFound, "Scope not found: "+within).
				WithDetails(map[string]any{"scopeId": within})
		}
		members = sc.Members
	}
	agents := r.reg.AgentsWhere(func(a *registry.Agent) bool {
		if a.Role != role || a.ID == from.AgentID {
			return false
		}
		_, in := slices.BinarySearch(members, a.ID) // Members are sorted
		return within == "" || in
	})
	return group(agentRecipients(agents), within)
}

func (r *Router) resolveParticipant(id string) (resolution, error) {
	var out []recipient
	for _, s := range r.reg.Sessions() {
		if s.ParticipantID == id && s.ClosedAt == 0 {
			out = append(out, sessionRecipient(&s))
		}
	}
	if len(out) == 0 {
		if a, ok := r.reg.Agent(id); ok {
			out = append(out, agentRecipient(&a))
		}
	}
	return nonEmpty(out, "")
}

func (r *Router) resolveParticipants(from Sender, which string) (resolution, error) {
	var out []recipient
	for _, s := range r.reg.Sessions() {
		if s.ID == from.SessionID || s.ClosedAt != 0 {
			continue
		}
		if which == "all" || (which == "agents" && s.ParticipantType == "agent") ||
			(which == "clients" && s.ParticipantType == "client") {
			out = append(out, sessionRecipient(&s))
		}
	}
	return group(out, "")
}

func agentRecipients(agents []registry.Agent) []recipient {
	out := make([]recipient, len(agents))
	for i := range agents {
		out[i] = agentRecipient(&agents[i])
	}
	return out
}

// dedup drops repeated recipients, keeping the first occurrence.
func dedup(in []recipient) []recipient {
	if len(in) < 2 {
		return in
	}
	seen := make(map[string]struct{}, len(in))
	out := in[:0]
	for _, rc := range in {
		key := rc.agentID
		if key == "" {
			key = "\x00" + rc.sessionID
		}
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		out = append(out, rc)
	}
	return out
}

// nonEmpty wraps recipients, failing with ADDRESS_NOT_FOUND when there are none.
func nonEmpty(out []recipient, scopeID string) (resolution, error) {
	if len(out) == 0 {
		return resolution{}, noRecipients()
	}
	return resolution{recipients: dedup(out), scopeID: scopeID}, nil
}

// group is the resolution of a group address (scope, role, broadcast,
// relatives, participants): having nobody in it right now is not an error,
// the send succeeds with delivered [] (map-protocol.md §6). Only a direct
// address that names nobody is 2000.
func group(out []recipient, scopeID string) (resolution, error) {
	return resolution{recipients: dedup(out), scopeID: scopeID}, nil
}

func noRecipients() error {
	return rpc.NewError(rpc.CodeAddressNotFound, "Address resolves to no recipient").
		WithDetails(map[string]any{"reason": "no_recipients"})
}

func agentNotFound(id string) error {
	return rpc.NewError(rpc.CodeAgentNotFound, "Agent not found: "+id).
		WithDetails(map[string]any{"agentId": id})
}
