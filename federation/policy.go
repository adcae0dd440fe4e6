package federation

import (
	"fmt"
	"path"
	"slices"
	"strings"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// AgentView is what export and import policies look at.
type AgentView struct {
	ID, Name, Role string
	Tags           []string
}

func agentView(a *concordv1.FedRemoteAgent) AgentView {
	return AgentView{ID: a.GetId(), Name: a.GetName(), Role: a.GetRole(), Tags: a.GetTags()}
}

// Matches reports whether p lets a through. An unset policy lets nothing
// through: exporting is always an explicit decision.
func Matches(p *concordv1.FedPolicy, a AgentView) bool {
	switch p.GetKind() {
	case concordv1.FedPolicyKind_FED_POLICY_KIND_ALL:
		return true
	case concordv1.FedPolicyKind_FED_POLICY_KIND_ROLE:
		return a.Role != "" && a.Role == p.GetValue()
	case concordv1.FedPolicyKind_FED_POLICY_KIND_NAME_GLOB:
		return globMatch(p.GetValue(), a.ID) || (a.Name != "" && globMatch(p.GetValue(), a.Name))
	case concordv1.FedPolicyKind_FED_POLICY_KIND_TAG:
		return slices.Contains(a.Tags, p.GetValue())
	}
	return false
}

func globMatch(pattern, s string) bool {
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// ParsePolicy reads the CLI form of a policy: none, all, role:R, name:GLOB
// or tag:T.
func ParsePolicy(s string) (*concordv1.FedPolicy, error) {
	kind, val, _ := strings.Cut(s, ":")
	p := &concordv1.FedPolicy{Value: val}
	switch kind {
	case "none":
		p.Kind = concordv1.FedPolicyKind_FED_POLICY_KIND_NONE
	case "all":
		p.Kind = concordv1.FedPolicyKind_FED_POLICY_KIND_ALL
	case "role":
		p.Kind = concordv1.FedPolicyKind_FED_POLICY_KIND_ROLE
	case "name":
		p.Kind = concordv1.FedPolicyKind_FED_POLICY_KIND_NAME_GLOB
		if _, err := path.Match(val, ""); err != nil {
			return nil, fmt.Errorf("policy %q: bad glob: %w", s, err)
		}
	case "tag":
		p.Kind = concordv1.FedPolicyKind_FED_POLICY_KIND_TAG
	default:
		return nil, fmt.Errorf("policy %q: want none, all, role:R, name:GLOB or tag:T", s)
	}
	if (p.Kind == concordv1.FedPolicyKind_FED_POLICY_KIND_NONE || p.Kind == concordv1.FedPolicyKind_FED_POLICY_KIND_ALL) != (val == "") {
		return nil, fmt.Errorf("policy %q: none and all take no value, role/name/tag need one", s)
	}
	return p, nil
}

// FormatPolicy is ParsePolicy's inverse.
func FormatPolicy(p *concordv1.FedPolicy) string {
	switch p.GetKind() {
	case concordv1.FedPolicyKind_FED_POLICY_KIND_ALL:
		return "all"
	case concordv1.FedPolicyKind_FED_POLICY_KIND_ROLE:
		return "role:" + p.GetValue()
	case concordv1.FedPolicyKind_FED_POLICY_KIND_NAME_GLOB:
		return "name:" + p.GetValue()
	case concordv1.FedPolicyKind_FED_POLICY_KIND_TAG:
		return "tag:" + p.GetValue()
	}
	return "none"
}

// validSystemID accepts 1..64 characters of [A-Za-z0-9._-]: system ids
// appear in "<sys>:agent:<id>" and in certificate URIs, so no ':' or '/'.
func validSystemID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidSystemID reports whether s may be a system id.
func ValidSystemID(s string) bool { return validSystemID(s) }
