package router

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/rpc"
)

// addrKind is one Address form of map-protocol.md §5.4.
type addrKind int

const (
	addrString       addrKind = iota // "id", "agent:<id>", "scope:<id>", "sys:agent:<id>"
	addrAgent                        // {agent}
	addrAgents                       // {agents:[...]}
	addrScope                        // {scope}
	addrRole                         // {role, within?}
	addrParent                       // {parent:true}
	addrChildren                     // {children:true}
	addrAncestors                    // {ancestors:true, depth?}
	addrDescendants                  // {descendants:true, depth?}
	addrSiblings                     // {siblings:true}
	addrBroadcast                    // {broadcast:true}
	addrSystem                       // {system:true}
	addrFederated                    // {system:"sysId", agent} or {system:"sysId", scope}
	addrParticipant                  // {participant}
	addrParticipants                 // {participants: all|agents|clients}
)

// address is a decoded Address.
type address struct {
	kind   addrKind
	id     string   // string form, agent, scope, participant, or federated system id
	ids    []string // agents
	role   string
	within string
	agent  string // federated agent id
	scope  string // federated scope id ({system, scope}: a Concord extension)
	which  string // participants: all|agents|clients
	depth  int    // 0 = unlimited (ancestors/descendants)
}

// primaryKeys are the keys that select a form; exactly one may appear
// (except {system:"id", agent}, the federated form).
var primaryKeys = map[string]addrKind{
	"agent": addrAgent, "agents": addrAgents, "scope": addrScope, "role": addrRole,
	"parent": addrParent, "children": addrChildren, "ancestors": addrAncestors,
	"descendants": addrDescendants, "siblings": addrSiblings, "broadcast": addrBroadcast,
	"system": addrSystem, "participant": addrParticipant, "participants": addrParticipants,
}

// parseAddress decodes the raw `to`. Malformed input is -32602 naming the
// field; two forms in one object is ADDRESS_AMBIGUOUS (2004).
func parseAddress(raw json.RawMessage) (address, error) {
	switch raw[0] {
	case '"':
		s, ok := jsonkit.Unquote(raw)
		if !ok || s == "" {
			return address{}, rpc.InvalidParams("to", "must be a non-empty string or an address object")
		}
		return address{kind: addrString, id: s}, nil
	case '{':
		if id, ok := plainAgentForm(raw); ok {
			return address{kind: addrAgent, id: id}, nil
		}
		return parseAddressObject(raw)
	default:
		return address{}, rpc.InvalidParams("to", "must be a string or an address object")
	}
}

// parseAddressObject decodes an address object (raw starts with '{').
func parseAddressObject(raw json.RawMessage) (address, error) {
	var obj members
	var forms []string
	err := jsonkit.Members(raw, func(k string, v []byte) error {
		if isNull(v) { // an explicit null reads as absent (SDKs may send `within: null`)
			return nil
		}
		if _, ok := primaryKeys[k]; ok {
			forms = append(forms, k)
		} else if k != "within" && k != "depth" {
			return rpc.InvalidParams("to."+k, "unknown address field")
		}
		obj = append(obj, member{k, v})
		return nil
	})
	var re *rpc.Error
	if errors.As(err, &re) {
		return address{}, re
	} else if err != nil {
		return address{}, rpc.InvalidParams("to", "must be an address object")
	}
	if len(forms) == 2 {
		slices.Sort(forms)
		if (forms[0] == "agent" || forms[0] == "scope") && forms[1] == "system" && isJSONString(obj.get("system")) {
			return parseFederated(obj, forms[0])
		}
	}
	switch len(forms) {
	case 0:
		return address{}, rpc.InvalidParams("to", "no address form (agent, agents, scope, role, parent, children, ancestors, descendants, siblings, broadcast, system, participant, participants)")
	case 1:
		return parseForm(forms[0], obj)
	default:
		slices.Sort(forms)
		return address{}, rpc.NewError(rpc.CodeAddressAmbiguous, "Address ambiguous: more than one address form").
			WithDetails(map[string]any{"fields": forms})
	}
}

// plainAgentForm recognises the commonest address, {"agent":"<id>"} written
// compactly with a non-empty id that needs no unescaping, without the
// general member scan (which allocates). Anything else returns false and
// takes the general path, which gives the same result for this form.
func plainAgentForm(raw []byte) (string, bool) {
	const head, tail = `{"agent":"`, `"}`
	if len(raw) <= len(head)+len(tail) || string(raw[:len(head)]) != head || string(raw[len(raw)-len(tail):]) != tail {
		return "", false
	}
	id := raw[len(head) : len(raw)-len(tail)]
	for _, c := range id {
		if c < 0x20 || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(id), true
}

// member is one key/value of an address object (a duplicate key: the last wins).
type member struct {
	key string
	val []byte
}

type members []member

func (m members) get(k string) []byte {
	for i := len(m) - 1; i >= 0; i-- {
		if m[i].key == k {
			return m[i].val
		}
	}
	return nil
}

func (m members) has(k string) bool { return m.get(k) != nil }

func parseForm(key string, obj members) (address, error) {
	a := address{kind: primaryKeys[key]}
	if obj.has("within") && a.kind != addrRole {
		return address{}, rpc.InvalidParams("to.within", "only valid with to.role")
	}
	if obj.has("depth") && !a.relative() {
		return address{}, rpc.InvalidParams("to.depth", "only valid with parent, children, ancestors, descendants or siblings")
	}
	v := obj.get(key)
	var err error
	switch a.kind {
	case addrAgent, addrScope, addrParticipant:
		a.id, err = nonEmptyString(v, idFields[a.kind])
	case addrAgents:
		a.ids, err = stringList(v, "to.agents")
	case addrRole:
		a.role, err = nonEmptyString(v, "to.role")
		if w := obj.get("within"); w != nil && err == nil {
			a.within, err = nonEmptyString(w, "to.within")
		}
	case addrParticipants:
		a.which, err = nonEmptyString(v, "to.participants")
		if err == nil && a.which != "all" && a.which != "agents" && a.which != "clients" {
			err = rpc.InvalidParams("to.participants", "must be all, agents or clients")
		}
	case addrSystem:
		if string(v) != "true" {
			err = rpc.InvalidParams("to.system", `must be true, or a system id together with to.agent`)
		}
	default: // parent, children, ancestors, descendants, siblings, broadcast
		if string(v) != "true" {
			err = rpc.InvalidParams("to."+key, "must be true")
		}
		if d := obj.get("depth"); d != nil && err == nil {
			a.depth, err = positiveInt(d, "to.depth")
		}
	}
	return a, err
}

// idFields names the id member of the forms that carry one (constant
// strings: no concatenation per message).
var idFields = map[addrKind]string{addrAgent: "to.agent", addrScope: "to.scope", addrParticipant: "to.participant"}

// parseFederated decodes {system, agent} or {system, scope} (form names
// the second member).
func parseFederated(obj members, form string) (address, error) {
	sys, err := nonEmptyString(obj.get("system"), "to.system")
	if err != nil {
		return address{}, err
	}
	if obj.has("within") || obj.has("depth") {
		return address{}, rpc.InvalidParams("to", "a federated address takes only system and agent or scope")
	}
	id, err := nonEmptyString(obj.get(form), "to."+form)
	if err != nil {
		return address{}, err
	}
	if form == "scope" {
		return address{kind: addrFederated, id: sys, scope: id}, nil
	}
	return address{kind: addrFederated, id: sys, agent: id}, nil
}

func (a address) relative() bool {
	switch a.kind {
	case addrParent, addrChildren, addrAncestors, addrDescendants, addrSiblings:
		return true
	}
	return false
}

func isJSONString(v json.RawMessage) bool { return len(v) > 0 && v[0] == '"' }

func nonEmptyString(v []byte, field string) (string, error) {
	s, ok := jsonkit.Unquote(v)
	if !ok || s == "" {
		return "", rpc.InvalidParams(field, "must be a non-empty string")
	}
	return s, nil
}

func stringList(v json.RawMessage, field string) ([]string, error) {
	var ss []string
	if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &ss) != nil {
		return nil, rpc.InvalidParams(field, "must be an array of agent ids")
	}
	if len(ss) == 0 {
		return nil, rpc.InvalidParams(field, "must not be empty")
	}
	for i, s := range ss {
		if s == "" {
			return nil, rpc.InvalidParams(field+"["+strconv.Itoa(i)+"]", "must be a non-empty string")
		}
	}
	return ss, nil
}

func positiveInt(v json.RawMessage, field string) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 {
		return 0, rpc.InvalidParams(field, "must be an integer >= 1")
	}
	return n, nil
}
