package access

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/concordmap/concord/node/registry"
)

// Client visibility (map-protocol.md §7 layer 2): what a participant may
// see, set by the system with map/permissions/update, whatever its agents'
// canSee allows. It narrows the same predicates (AgentVisible,
// ScopeVisible, EventVisible, StructureOf), so lists, gets, the graph,
// live events and replay agree.

// RuleRoles is the {"roles": [roles]} rule kind of client visibility.
const RuleRoles = "roles"

// ClientVisibility is a participant's client visibility. The zero value
// restricts nothing.
type ClientVisibility struct {
	Agents Rule // all|none|{include: [agent ids]}|{roles: [roles]}
	Scopes Rule // all|none|{include: [scope ids]}
	Events Rule // all|none|{include: [event types]}
	// HideStructure withholds the agent hierarchy (structure: false).
	HideStructure bool
}

// Unrestricted reports whether c hides nothing.
func (c *ClientVisibility) Unrestricted() bool {
	return c == nil || c.Agents.all() && c.Scopes.all() && c.Events.all() && !c.HideStructure
}

// ParseClientVisibility decodes and validates a client visibility object
// {agents, scopes, events, structure}; absent keys restrict nothing.
// Errors name the field relative to it ("agents").
func ParseClientVisibility(raw json.RawMessage) (ClientVisibility, error) {
	var c ClientVisibility
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return c, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return c, &FieldError{"", "must be an object with agents, scopes, events and structure"}
	}
	for k, v := range fields {
		var err error
		switch k {
		case "agents":
			c.Agents, err = parseClientRule(v, true)
		case "scopes":
			c.Scopes, err = parseClientRule(v, false)
		case "events":
			c.Events, err = parseClientRule(v, false)
		case "structure":
			var on bool
			if json.Unmarshal(v, &on) != nil {
				err = fmt.Errorf("must be a boolean")
			}
			c.HideStructure = !on
		default:
			err = fmt.Errorf("unknown visibility field")
		}
		if err != nil {
			return c, &FieldError{k, err.Error()}
		}
	}
	return c, nil
}

func parseClientRule(v json.RawMessage, roles bool) (Rule, error) {
	want := `all, none or {"include": [ids]}`
	if roles {
		want = `all, none, {"include": [ids]} or {"roles": [roles]}`
	}
	var kw string
	if json.Unmarshal(v, &kw) == nil {
		if kw != RuleAll && kw != RuleNone {
			return Rule{}, fmt.Errorf("must be %s", want)
		}
		return Rule{Kind: kw}, nil
	}
	var obj map[string][]string
	if json.Unmarshal(v, &obj) != nil || len(obj) != 1 {
		return Rule{}, fmt.Errorf("must be %s", want)
	}
	for k, list := range obj {
		if k != RuleInclude && !(roles && k == RuleRoles) || list == nil {
			return Rule{}, fmt.Errorf("must be %s", want)
		}
		if len(list) > maxIncludes {
			return Rule{}, fmt.Errorf("lists at most %d entries", maxIncludes)
		}
		return Rule{Kind: k, Include: list}, nil
	}
	return Rule{}, nil
}

// MarshalJSON writes c in the shape ParseClientVisibility reads.
func (c ClientVisibility) MarshalJSON() ([]byte, error) {
	rule := func(r Rule) any {
		switch r.Kind {
		case "", RuleAll:
			return RuleAll
		case RuleNone:
			return RuleNone
		}
		return map[string][]string{r.Kind: r.Include}
	}
	return json.Marshal(map[string]any{"agents": rule(c.Agents), "scopes": rule(c.Scopes),
		"events": rule(c.Events), "structure": !c.HideStructure})
}

func (c *ClientVisibility) seesAgent(a *registry.Agent) bool {
	if c == nil {
		return true
	}
	if c.Agents.Kind == RuleRoles {
		return a.Role != "" && slices.Contains(c.Agents.Include, a.Role)
	}
	return listRule(c.Agents, a.ID)
}

func (c *ClientVisibility) seesScope(sc *registry.Scope) bool {
	return c == nil || listRule(c.Scopes, sc.ID)
}

func (c *ClientVisibility) seesEventType(t string) bool {
	return c == nil || listRule(c.Events, t)
}
