package access

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/concordmap/concord/node/registry"
)

// Role permissions (map-protocol.md §7): the server's rolePermissions[role]
// are deep-merged between the defaults (allow everything) and an agent's
// permissionOverrides, so an override replaces a role's rule key by key.

// RoleReader is the optional part of a Reader that knows the server's
// role permissions (registry.State does); without it roles add nothing.
type RoleReader interface {
	RolePermissions(role string) json.RawMessage
}

// ParseRolePermissions decodes and validates a rolePermissions table
// {role: permissions}; each value has the shape of permissionOverrides.
// Errors name the role and field ("worker.canSee.agents").
func ParseRolePermissions(raw []byte) (map[string]json.RawMessage, error) {
	var roles map[string]json.RawMessage
	if err := json.Unmarshal(raw, &roles); err != nil {
		return nil, fmt.Errorf("role permissions must be an object of role -> permissions: %w", err)
	}
	for role, p := range roles {
		if role == "" {
			return nil, fmt.Errorf("role permissions: empty role name")
		}
		if _, err := ParsePermissions(p); err != nil {
			return nil, fmt.Errorf("role permissions: %s.%w", role, err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, p); err != nil {
			return nil, fmt.Errorf("role permissions: %s: %w", role, err)
		}
		roles[role] = c.Bytes()
	}
	return roles, nil
}

// MergePermissions deep-merges over onto base (both permissionOverrides
// objects): groups merge, and over's rule for a key replaces base's.
// Inputs are assumed valid (ParsePermissions); a value that is not an
// object of objects is ignored.
func MergePermissions(base, over json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(base)) == 0 {
		return over
	}
	if len(bytes.TrimSpace(over)) == 0 {
		return base
	}
	out := map[string]map[string]json.RawMessage{}
	for _, b := range []json.RawMessage{base, over} {
		var groups map[string]map[string]json.RawMessage
		_ = json.Unmarshal(b, &groups)
		for g, fields := range groups {
			if out[g] == nil {
				out[g] = map[string]json.RawMessage{}
			}
			maps.Copy(out[g], fields)
		}
	}
	merged, _ := json.Marshal(out)
	return merged
}

// EffectivePermissions returns a's permission set: rolePermissions[a.Role]
// (when r knows roles) deep-merged with a's permissionOverrides.
func EffectivePermissions(r Reader, a *registry.Agent) Permissions {
	rr, ok := r.(RoleReader)
	if !ok || a.Role == "" {
		return PermissionsOf(a)
	}
	role := rr.RolePermissions(a.Role)
	if len(role) == 0 {
		return PermissionsOf(a)
	}
	merged := *a
	merged.PermissionOverrides = MergePermissions(role, a.PermissionOverrides)
	return PermissionsOf(&merged) // cached by the merged bytes
}
