// Package access decides what a participant may see (map-protocol.md §7):
// agents by their visibility (public, parent-only, scope, system), scopes
// by theirs (public, members, system), and events by the entities they
// concern, message events by who sent and received them and the scope's
// messageVisibility. One predicate serves list, get and graph (node/mapsvc)
// and subscriptions and replay (node/fanout), so every node and every
// method answers the same from the same replicated state.
package access
