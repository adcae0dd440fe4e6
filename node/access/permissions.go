package access

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/concordmap/concord/node/registry"
)

// Agent permission layer (map-protocol.md §7, the SDK's AgentPermissions):
// an agent's permissionOverrides, stored with the agent in Raft, say what
// it may see (canSee), whom it may message (canMessage) and whom it
// accepts messages from (acceptsFrom). Unset rules are "all", as in the
// SDK's default configuration. A participant speaking for several agents
// (a session owning more than one) is held to every one of them: the most
// restrictive rule wins, so registering a second agent cannot undo a
// restriction placed on the first.

// Rule kinds.
const (
	RuleAll       = "all"
	RuleNone      = "none"
	RuleHierarchy = "hierarchy"
	RuleScoped    = "scoped"
	RuleDirect    = "direct"
	RuleMember    = "member"
	RuleInclude   = "include" // {"include": [ids]}
)

// Rule is one permission rule: a keyword, or an include list.
type Rule struct {
	Kind    string // "" means unset (all)
	Include []string
}

func (r Rule) all() bool { return r.Kind == "" || r.Kind == RuleAll }

// Permissions is an agent's effective permission set.
type Permissions struct {
	SeeAgents, SeeScopes         Rule
	Structure                    string // full (or ""), local, none
	MessageAgents, MessageScopes Rule
	AcceptAgents, AcceptClients  Rule
	AcceptSystems                Rule
}

// Unrestricted reports whether p allows everything (the default).
func (p *Permissions) Unrestricted() bool {
	return p.SeeAgents.all() && p.SeeScopes.all() && (p.Structure == "" || p.Structure == "full") &&
		p.MessageAgents.all() && p.MessageScopes.all() &&
		p.AcceptAgents.all() && p.AcceptClients.all() && p.AcceptSystems.all()
}

// FieldError names the invalid field of a permissionOverrides object
// (relative to it, e.g. "canSee.agents").
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ruleKinds lists the keywords each rule accepts (besides {include}).
var ruleKinds = map[string][]string{
	"canSee.agents":       {RuleAll, RuleHierarchy, RuleScoped, RuleDirect},
	"canSee.scopes":       {RuleAll, RuleMember},
	"canMessage.agents":   {RuleAll, RuleHierarchy, RuleScoped},
	"canMessage.scopes":   {RuleAll, RuleMember},
	"acceptsFrom.agents":  {RuleAll, RuleHierarchy, RuleScoped},
	"acceptsFrom.clients": {RuleAll, RuleNone},
	"acceptsFrom.systems": {RuleAll, RuleNone},
}

// maxIncludes bounds an include list (outside input kept in Raft).
const maxIncludes = 256

// ParsePermissions decodes and validates a permissionOverrides object
// (nil or empty: the defaults). Unknown groups or keys are refused, so a
// misspelt restriction is not silently ignored.
func ParsePermissions(raw json.RawMessage) (Permissions, error) {
	var p Permissions
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return p, nil
	}
	var groups map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &groups); err != nil {
		return p, &FieldError{"", "must be an object of canSee, canMessage and acceptsFrom objects"}
	}
	targets := map[string]*Rule{
		"canSee.agents": &p.SeeAgents, "canSee.scopes": &p.SeeScopes,
		"canMessage.agents": &p.MessageAgents, "canMessage.scopes": &p.MessageScopes,
		"acceptsFrom.agents": &p.AcceptAgents, "acceptsFrom.clients": &p.AcceptClients, "acceptsFrom.systems": &p.AcceptSystems,
	}
	for g, fields := range groups {
		if g != "canSee" && g != "canMessage" && g != "acceptsFrom" {
			return p, &FieldError{g, "unknown permission group"}
		}
		for k, v := range fields {
			name := g + "." + k
			if name == "canSee.structure" {
				if err := json.Unmarshal(v, &p.Structure); err != nil || !slices.Contains([]string{"full", "local", "none"}, p.Structure) {
					return p, &FieldError{name, "must be full, local or none"}
				}
				continue
			}
			dst, ok := targets[name]
			if !ok {
				return p, &FieldError{name, "unknown permission"}
			}
			r, err := parseRule(v, ruleKinds[name])
			if err != nil {
				return p, &FieldError{name, err.Error()}
			}
			*dst = r
		}
	}
	return p, nil
}

func parseRule(v json.RawMessage, kinds []string) (Rule, error) {
	var kw string
	if json.Unmarshal(v, &kw) == nil {
		if !slices.Contains(kinds, kw) {
			return Rule{}, fmt.Errorf("must be one of %v or {\"include\": [ids]}", kinds)
		}
		return Rule{Kind: kw}, nil
	}
	var inc struct {
		Include *[]string `json:"include"`
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&inc); err != nil || inc.Include == nil {
		return Rule{}, fmt.Errorf("must be one of %v or {\"include\": [ids]}", kinds)
	}
	if len(*inc.Include) > maxIncludes {
		return Rule{}, fmt.Errorf("include lists at most %d ids", maxIncludes)
	}
	return Rule{Kind: RuleInclude, Include: *inc.Include}, nil
}

// permCache memoises parsed overrides by their bytes: the fan-out asks
// for the same agents' permissions for every event. Bounded: cleared when
// it grows past permCacheMax distinct values.
var permCache struct {
	sync.RWMutex
	m map[string]Permissions
}

const permCacheMax = 4096

// PermissionsOf returns a's effective permissions. Overrides that do not
// parse (stored before validation existed) restrict nothing.
func PermissionsOf(a *registry.Agent) Permissions {
	if len(a.PermissionOverrides) == 0 {
		return Permissions{}
	}
	permCache.RLock()
	p, ok := permCache.m[string(a.PermissionOverrides)]
	permCache.RUnlock()
	if ok {
		return p
	}
	p, _ = ParsePermissions(a.PermissionOverrides)
	permCache.Lock()
	if permCache.m == nil || len(permCache.m) >= permCacheMax {
		permCache.m = map[string]Permissions{}
	}
	permCache.m[string(a.PermissionOverrides)] = p
	permCache.Unlock()
	return p
}

// maxDepth bounds hierarchy walks (a parent chain is acyclic in the
// registry, but a bound costs nothing).
const maxDepth = 64

// related reports whether target is subject, or an ancestor or a
// descendant of it.
func related(r Reader, subject, target *registry.Agent) bool {
	if subject.ID == target.ID {
		return true
	}
	return isAncestor(r, target.ID, subject) || isAncestor(r, subject.ID, target)
}

// isAncestor reports whether id is on a's parent chain.
func isAncestor(r Reader, id string, a *registry.Agent) bool {
	p := a.Parent
	for range maxDepth {
		if p == "" {
			return false
		}
		if p == id {
			return true
		}
		pa, ok := r.Agent(p)
		if !ok {
			return false
		}
		p = pa.Parent
	}
	return false
}

func shareScope(a, b *registry.Agent) bool {
	for _, s := range a.Scopes {
		if slices.Contains(b.Scopes, s) {
			return true
		}
	}
	return false
}

// agentRule applies an agents rule of subject towards target.
func agentRule(r Reader, rule Rule, subject, target *registry.Agent) bool {
	switch rule.Kind {
	case "", RuleAll:
		return true
	case RuleHierarchy:
		return related(r, subject, target)
	case RuleScoped:
		return subject.ID == target.ID || shareScope(subject, target)
	case RuleDirect:
		return subject.ID == target.ID
	case RuleInclude:
		return subject.ID == target.ID || slices.Contains(rule.Include, target.ID)
	}
	return false
}

// scopeRule applies a scopes rule of subject towards scope sc.
func scopeRule(rule Rule, subject *registry.Agent, sc *registry.Scope) bool {
	switch rule.Kind {
	case "", RuleAll:
		return true
	case RuleMember:
		return slices.Contains(subject.Scopes, sc.ID) || slices.Contains(sc.Members, subject.ID)
	case RuleInclude:
		return slices.Contains(rule.Include, sc.ID)
	}
	return false
}

// eachAgent calls f for every agent of ids still registered, and
// reports whether f held for all of them.
func eachAgent(r Reader, ids []string, f func(a *registry.Agent, p *Permissions) bool) bool {
	for _, id := range ids {
		a, ok := r.Agent(id)
		if !ok {
			continue
		}
		p := EffectivePermissions(r, &a)
		if p.Unrestricted() {
			continue
		}
		if !f(&a, &p) {
			return false
		}
	}
	return true
}

// restrictedAgent is a viewer agent whose permissions restrict something.
type restrictedAgent struct {
	a registry.Agent
	p Permissions
}

// WithLayer returns v with its agents' permissions looked up once, for a
// series of decisions against the same registry state (a list, the
// events of one fan-out pass). Without it every decision looks them up.
func (v Viewer) WithLayer(r Reader) Viewer {
	out := []restrictedAgent{}
	eachAgent(r, v.Agents, func(a *registry.Agent, p *Permissions) bool {
		out = append(out, restrictedAgent{a: *a, p: *p})
		return true
	})
	v.restricted = &out
	return v
}

// layer calls f for each restricted viewer agent; it reports whether f
// held for all of them.
func (v Viewer) layer(r Reader, f func(a *registry.Agent, p *Permissions) bool) bool {
	if v.restricted == nil {
		return eachAgent(r, v.Agents, f)
	}
	for i := range *v.restricted {
		ra := &(*v.restricted)[i]
		if !f(&ra.a, &ra.p) {
			return false
		}
	}
	return true
}

// agentLayerSeesAgent applies canSee.agents of every viewer agent.
func agentLayerSeesAgent(r Reader, v Viewer, t *registry.Agent) bool {
	return v.layer(r, func(a *registry.Agent, p *Permissions) bool { return agentRule(r, p.SeeAgents, a, t) })
}

// agentLayerSeesScope applies canSee.scopes of every viewer agent.
func agentLayerSeesScope(r Reader, v Viewer, sc *registry.Scope) bool {
	return v.layer(r, func(a *registry.Agent, p *Permissions) bool { return scopeRule(p.SeeScopes, a, sc) })
}

// StructureOf returns how much of the agent hierarchy v may see: "full",
// "local" (edges touching its own agents) or "none"; the most restrictive
// of its agents' canSee.structure.
func StructureOf(r Reader, v Viewer) string {
	out := "full"
	if v.Client != nil && v.Client.HideStructure {
		return "none"
	}
	v.layer(r, func(_ *registry.Agent, p *Permissions) bool {
		switch {
		case p.Structure == "none":
			out = "none"
		case p.Structure == "local" && out == "full":
			out = "local"
		}
		return true
	})
	return out
}

// Sender is the author of a map/send, for canMessage and acceptsFrom.
type Sender struct {
	ParticipantID   string
	ParticipantType string
	// Agents are the agents it speaks for: the sending agent, or every
	// agent its session owns when it names none.
	Agents []string
	// SystemID is the system it belongs to (acceptsFrom.systems).
	SystemID string
}

// MayMessage reports whether s may send to agent t: every sending agent's
// canMessage.agents allows t, and t's acceptsFrom allows the sender (by
// its participant type: agents by relation, clients by participant id,
// systems and gateways by system id). System participants are bound by
// the recipient's acceptsFrom.systems only.
func MayMessage(r Reader, s Sender, t *registry.Agent) bool {
	if s.ParticipantType != "system" && !eachAgent(r, s.Agents, func(a *registry.Agent, p *Permissions) bool {
		return agentRule(r, p.MessageAgents, a, t)
	}) {
		return false
	}
	acc := EffectivePermissions(r, t)
	switch s.ParticipantType {
	case "agent":
		if acc.AcceptAgents.all() {
			return true
		}
		if len(s.Agents) == 0 {
			return false // no agent to relate to
		}
		return eachAgentAll(r, s.Agents, func(a *registry.Agent) bool { return agentRule(r, acc.AcceptAgents, t, a) })
	case "client":
		return listRule(acc.AcceptClients, s.ParticipantID)
	default: // system, gateway
		return listRule(acc.AcceptSystems, s.SystemID)
	}
}

// AcceptsFromSystem applies t's acceptsFrom.systems to a message from
// another system (federation).
func AcceptsFromSystem(r Reader, t *registry.Agent, systemID string) bool {
	p := EffectivePermissions(r, t)
	return listRule(p.AcceptSystems, systemID)
}

// SenderRestricted reports whether any of s's agents has canMessage
// rules that may refuse a target (system participants are bound by
// recipients' acceptsFrom only).
func SenderRestricted(r Reader, s Sender) bool {
	if s.ParticipantType == "system" {
		return false
	}
	return !eachAgent(r, s.Agents, func(_ *registry.Agent, p *Permissions) bool {
		return p.MessageAgents.all() && p.MessageScopes.all()
	})
}

// MaySendToScope reports whether every sending agent's
// canMessage.scopes allows scope sc.
func MaySendToScope(r Reader, s Sender, sc *registry.Scope) bool {
	if s.ParticipantType == "system" {
		return true
	}
	return eachAgent(r, s.Agents, func(a *registry.Agent, p *Permissions) bool { return scopeRule(p.MessageScopes, a, sc) })
}

// eachAgentAll is eachAgent without the permissions shortcut.
func eachAgentAll(r Reader, ids []string, f func(a *registry.Agent) bool) bool {
	for _, id := range ids {
		a, ok := r.Agent(id)
		if ok && !f(&a) {
			return false
		}
	}
	return true
}

// listRule applies an all|none|{include} rule to an id.
func listRule(rule Rule, id string) bool {
	switch rule.Kind {
	case "", RuleAll:
		return true
	case RuleInclude:
		return id != "" && slices.Contains(rule.Include, id)
	}
	return false
}
