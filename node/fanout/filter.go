package fanout

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/concordmap/concord/node/rpc"
)

// filter is a compiled SubscriptionFilter (map-protocol.md §5.6): AND
// across fields, OR within a field; an empty or absent field matches
// everything, so the zero filter matches every event.
type filter struct {
	agents         []string // agents ∪ fromAgents; an entry ending in "*" is a prefix
	roles          []string // roles ∪ fromRoles
	scopes         []string
	types          []typePattern
	priorities     []string
	correlationIDs []string
	metadata       map[string]any // every pair must equal the agent's metadata (dotted paths allowed)
	environment    map[string]any // same, on the agent's environment
}

// typePattern matches a normalized event type (see typeKey): exactly, or
// by prefix for "x.*" / "x*" patterns; all for "*".
type typePattern struct {
	key    string
	prefix bool
}

// typeKey normalizes an event type so the snake_case names the SDK uses
// and the dotted aliases of docs/03 compare equal: agent.state.changed and
// agent_state_changed both become agent_state_changed.
func typeKey(t string) string {
	return strings.ReplaceAll(strings.ToLower(t), ".", "_")
}

func compileType(p string) typePattern {
	if strings.HasSuffix(p, "*") {
		return typePattern{key: typeKey(strings.TrimSuffix(p, "*")), prefix: true}
	}
	return typePattern{key: typeKey(p)}
}

func (tp typePattern) match(key string) bool {
	if tp.prefix {
		return strings.HasPrefix(key, tp.key)
	}
	return key == tp.key
}

var validPriorities = []string{"urgent", "high", "normal", "low"}

// parseFilter validates and compiles the client's filter. Unknown fields
// are refused (the schema's SubscriptionFilter is closed) so a typo does not
// silently subscribe to everything. mail and trajectory are accepted and
// not applied: this node emits no mail or trajectory events.
func parseFilter(raw json.RawMessage) (*filter, error) {
	f := &filter{}
	if len(raw) == 0 || string(raw) == "null" {
		return f, nil
	}
	var obj map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return nil, rpc.InvalidParams("filter", "must be an object")
	}
	for _, k := range sortedKeys(obj) {
		v := obj[k]
		if string(v) == "null" {
			continue
		}
		field := "filter." + k
		var err error
		var list []string
		switch k {
		case "agents", "fromAgents":
			list, err = strList(v, field)
			f.agents = append(f.agents, list...)
		case "roles", "fromRoles":
			list, err = strList(v, field)
			f.roles = append(f.roles, list...)
		case "scopes":
			f.scopes, err = strList(v, field)
		case "correlationIds":
			f.correlationIDs, err = strList(v, field)
		case "eventTypes":
			list, err = strList(v, field)
			for _, t := range list {
				f.types = append(f.types, compileType(t))
			}
		case "priorities":
			f.priorities, err = strList(v, field)
			for i, p := range f.priorities {
				if err == nil && !slices.Contains(validPriorities, p) {
					err = rpc.InvalidParams(field+"["+strconv.Itoa(i)+"]", "must be one of urgent, high, normal, low")
				}
			}
		case "metadataMatch":
			f.metadata, err = object(v, field)
		case "environmentMatch":
			f.environment, err = object(v, field)
		case "mail", "trajectory", "_meta":
			_, err = object(v, field)
		default:
			err = rpc.InvalidParams(field, "unknown filter field")
		}
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

func strList(v json.RawMessage, field string) ([]string, error) {
	var ss []string
	if v[0] != '[' || json.Unmarshal(v, &ss) != nil {
		return nil, rpc.InvalidParams(field, "must be an array of strings")
	}
	for i, s := range ss {
		if s == "" {
			return nil, rpc.InvalidParams(field+"["+strconv.Itoa(i)+"]", "must be a non-empty string")
		}
	}
	return ss, nil
}

func object(v json.RawMessage, field string) (map[string]any, error) {
	var m map[string]any
	if v[0] != '{' || json.Unmarshal(v, &m) != nil {
		return nil, rpc.InvalidParams(field, "must be an object")
	}
	return m, nil
}

// match reports whether the event passes the filter. info is computed on
// demand only for fields that need the event's agents or data.
func (f *filter) match(p *prepared, look agentLookup) bool {
	if len(f.types) > 0 && !slices.ContainsFunc(f.types, func(tp typePattern) bool { return tp.match(p.typeKey) }) {
		return false
	}
	if len(f.agents) > 0 && !f.matchAgents(p) {
		return false
	}
	needInfo := len(f.roles) > 0 || len(f.scopes) > 0 || len(f.priorities) > 0 ||
		len(f.correlationIDs) > 0 || len(f.metadata) > 0 || len(f.environment) > 0
	if !needInfo {
		return true
	}
	in := p.infoFrom(look)
	if len(f.scopes) > 0 && !anyIn(f.scopes, p.ev.ScopeIDs) &&
		!slices.ContainsFunc(in.agents, func(a *agentView) bool { return anyIn(f.scopes, a.Scopes) }) {
		return false
	}
	if len(f.roles) > 0 && !slices.ContainsFunc(in.agents, func(a *agentView) bool { return slices.Contains(f.roles, a.Role) }) {
		return false
	}
	if len(f.priorities) > 0 && !slices.Contains(f.priorities, in.priority) {
		return false
	}
	if len(f.correlationIDs) > 0 && (in.correlationID == "" || !slices.Contains(f.correlationIDs, in.correlationID)) {
		return false
	}
	if len(f.metadata) > 0 && !slices.ContainsFunc(in.agents, func(a *agentView) bool { return matchAll(f.metadata, a.metadata()) }) {
		return false
	}
	if len(f.environment) > 0 && !slices.ContainsFunc(in.agents, func(a *agentView) bool { return matchAll(f.environment, a.environment()) }) {
		return false
	}
	return true
}

// matchAgents: the event is about (AgentIDs) or from (Source) a listed agent.
func (f *filter) matchAgents(p *prepared) bool {
	for _, want := range f.agents {
		if prefix, ok := strings.CutSuffix(want, "*"); ok {
			if strings.HasPrefix(p.ev.Source, prefix) ||
				slices.ContainsFunc(p.ev.AgentIDs, func(id string) bool { return strings.HasPrefix(id, prefix) }) {
				return true
			}
		} else if p.ev.Source == want || slices.Contains(p.ev.AgentIDs, want) {
			return true
		}
	}
	return false
}

func anyIn(want, have []string) bool {
	return slices.ContainsFunc(have, func(s string) bool { return slices.Contains(want, s) })
}

// matchAll: every pair of want equals the value at the same key (or dotted
// path, e.g. "os.type") in have.
func matchAll(want, have map[string]any) bool {
	if have == nil {
		return false
	}
	for k, w := range want {
		v, ok := lookupPath(have, k)
		if !ok || !reflect.DeepEqual(v, w) {
			return false
		}
	}
	return true
}

func lookupPath(m map[string]any, path string) (any, bool) {
	if v, ok := m[path]; ok {
		return v, true
	}
	var cur any = m
	for part := range strings.SplitSeq(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
