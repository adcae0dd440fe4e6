// Package access decides what a participant may see (map-protocol.md §7):
// agents by their visibility (public, parent-only, scope, system), scopes
// by theirs (public, members, system), and events by the entities they
// concern, message events by who sent and received them and the scope's
// messageVisibility. On top, the agent permission layer (permissions.go):
// the canSee, canMessage and acceptsFrom rules of an agent's
// permissionOverrides bound what its participant sees and whom it may
// message (MayMessage, MaySendToScope, used by node/router), merged under
// the server's rolePermissions of the agent's role (roles.go); and the
// client visibility a system set on the participant (clientvis.go), which
// narrows agents, scopes, event types and structure whatever its agents
// allow. One predicate serves list, get and graph (node/mapsvc)
// and subscriptions and replay (node/fanout), so every node and every
// method answers the same from the same replicated state.
package access
