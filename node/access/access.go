package access

import (
	"encoding/json"
	"strings"

	"github.com/concordmap/concord/node/registry"
)

// Reader is the part of the registry the rules read.
type Reader interface {
	Agent(id string) (registry.Agent, bool)
	Scope(id string) (registry.Scope, bool)
}

// Viewer is the participant a decision is made for.
type Viewer struct {
	ParticipantID   string
	ParticipantType string
	// Agents are the agents the participant's session owns: their
	// canSee permissions bound what it sees (permissions.go).
	Agents []string
	// Client is the participant's client visibility (clientvis.go); nil
	// restricts nothing.
	Client *ClientVisibility

	// restricted caches the restricted ones among Agents (WithLayer), so
	// a decision over many agents or events looks them up once.
	restricted *[]restrictedAgent
}

// System participants see everything.
func (v Viewer) System() bool { return v.ParticipantType == "system" }

// owns reports whether v speaks for agent id: it owns it, or it is it (an
// agent participant whose participant id is its agent id).
func owns(r Reader, v Viewer, id string) bool {
	if id == "" {
		return false
	}
	if id == v.ParticipantID {
		return true
	}
	a, ok := r.Agent(id)
	return ok && a.OwnerID != "" && a.OwnerID == v.ParticipantID
}

// ownsMemberOf reports whether v owns an agent in scope id.
func ownsMemberOf(r Reader, v Viewer, id string) bool {
	sc, ok := r.Scope(id)
	if !ok {
		return false
	}
	for _, m := range sc.Members {
		if owns(r, v, m) {
			return true
		}
	}
	return false
}

// AgentVisible applies the agent's visibility: public (or unset) to all;
// parent-only to whoever owns its parent; scope to whoever owns an agent
// in one of its scopes; system to system participants. Its owner always
// sees it. Then the viewer's own agents' canSee.agents (permissions.go)
// must allow it too.
func AgentVisible(r Reader, v Viewer, a *registry.Agent) bool {
	if v.System() || a.ID == v.ParticipantID || (a.OwnerID != "" && a.OwnerID == v.ParticipantID) {
		return true
	}
	if !v.Client.seesAgent(a) || !agentLayerSeesAgent(r, v, a) {
		return false
	}
	switch a.Visibility {
	case "", "public":
		return true
	case "parent-only":
		return owns(r, v, a.Parent)
	case "scope":
		for _, sc := range a.Scopes {
			if ownsMemberOf(r, v, sc) {
				return true
			}
		}
	}
	return false
}

// ScopeVisible applies the scope's visibility: public (or unset) to all;
// members to whoever owns a member agent; system to system participants.
// Its owner always sees it. The viewer's agents' canSee.scopes must allow
// it too.
func ScopeVisible(r Reader, v Viewer, sc *registry.Scope) bool {
	if v.System() || (sc.OwnerID != "" && sc.OwnerID == v.ParticipantID) {
		return true
	}
	if !v.Client.seesScope(sc) || !agentLayerSeesScope(r, v, sc) {
		return false
	}
	switch sc.Visibility {
	case "", "public":
		return true
	case "members":
		return ownsMemberOf(r, v, sc.ID)
	}
	return false
}

// EventVisible decides whether v may receive ev (live or replayed). A
// message event is seen by its sender, the owners of the agents it names
// (sender and recipients) and, for a scope message, by the scope's
// members (messageVisibility members or unset) or everyone (public).
// Any other event is hidden when an agent or scope it concerns is hidden
// from v; entities no longer in the registry do not hide it.
func EventVisible(r Reader, v Viewer, ev *registry.Event) bool {
	if v.System() {
		return true
	}
	if !v.Client.seesEventType(ev.Type) {
		return false
	}
	if ev.Type == "permissions_client_updated" {
		// A participant's capability ceiling is its business and the
		// system's (node/acl emits it with the participant in clientId).
		var d struct {
			ClientID string `json:"clientId"`
		}
		return json.Unmarshal(ev.Data, &d) == nil && d.ClientID != "" && d.ClientID == v.ParticipantID
	}
	if strings.HasPrefix(ev.Type, "message_") {
		if ev.Source == v.ParticipantID || owns(r, v, ev.Source) {
			return true
		}
		for _, id := range ev.AgentIDs {
			if owns(r, v, id) {
				return true
			}
		}
		for _, id := range ev.ScopeIDs {
			sc, ok := r.Scope(id)
			if !ok {
				continue
			}
			if !agentLayerSeesScope(r, v, &sc) {
				continue
			}
			switch sc.MessageVisibility {
			case "public":
				return true
			case "", "members":
				if ownsMemberOf(r, v, id) {
					return true
				}
			}
		}
		return false
	}
	if v.restricted == nil && len(v.Agents) > 0 && len(ev.AgentIDs)+len(ev.ScopeIDs) > 2 {
		v = v.WithLayer(r) // many checks below: look the viewer's agents up once
	}
	for _, id := range ev.AgentIDs {
		if a, ok := r.Agent(id); ok && !AgentVisible(r, v, &a) {
			return false
		}
	}
	for _, id := range ev.ScopeIDs {
		if sc, ok := r.Scope(id); ok && !ScopeVisible(r, v, &sc) {
			return false
		}
	}
	return true
}
