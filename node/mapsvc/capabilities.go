package mapsvc

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Participant types (map-protocol.md §1).
const (
	TypeAgent   = "agent"
	TypeClient  = "client"
	TypeSystem  = "system"
	TypeGateway = "gateway"
)

// Capabilities is the granted ParticipantCapabilities object returned by
// map/connect, plus the SDK groups (streaming, federation) and the
// advertise-only extensions list (map-protocol.md §3.2, D8).
type Capabilities struct {
	Observation struct {
		CanObserve bool `json:"canObserve"`
		CanQuery   bool `json:"canQuery"`
	} `json:"observation"`
	Messaging struct {
		CanSend      bool `json:"canSend"`
		CanReceive   bool `json:"canReceive"`
		CanBroadcast bool `json:"canBroadcast"`
	} `json:"messaging"`
	Lifecycle struct {
		CanSpawn      bool `json:"canSpawn"`
		CanRegister   bool `json:"canRegister"`
		CanUnregister bool `json:"canUnregister"`
		CanSteer      bool `json:"canSteer"`
		CanStop       bool `json:"canStop"`
	} `json:"lifecycle"`
	Scopes struct {
		CanCreateScopes bool `json:"canCreateScopes"`
		CanManageScopes bool `json:"canManageScopes"`
	} `json:"scopes"`
	Federation struct {
		CanFederate bool `json:"canFederate"`
	} `json:"federation"`
	Streaming struct {
		SupportsAck         bool `json:"supportsAck"`
		SupportsFlowControl bool `json:"supportsFlowControl"`
		SupportsPause       bool `json:"supportsPause"`
	} `json:"streaming"`
	Extensions []Extension `json:"extensions"`
}

// defaultCapabilities are the rights of each participant type
// (map-protocol.md §3.2, docs/00 matrix), the most a participant of that
// type is granted. With auth "none" there is no principal to grant more,
// so the "only if granted" client rights (send, steer, stop) are on:
// SDK clients send requests and stop agents without asking.
//   - client: observe, query, send, steer, stop; never receive, broadcast,
//     spawn, register or manage scopes.
//   - agent: everything in core (its "role" decides in richer setups).
//   - system: everything.
//   - gateway: observe, query, send, receive, federate (map/federation/*);
//     no lifecycle or scopes.
func defaultCapabilities(ptype string, fanout bool) Capabilities {
	var c Capabilities
	c.Observation.CanObserve, c.Observation.CanQuery = true, true
	c.Messaging.CanSend = true
	switch ptype {
	case TypeClient:
		c.Lifecycle.CanSteer, c.Lifecycle.CanStop = true, true
	case TypeAgent, TypeSystem:
		c.Messaging.CanReceive, c.Messaging.CanBroadcast = true, true
		c.Lifecycle.CanSpawn, c.Lifecycle.CanRegister, c.Lifecycle.CanUnregister = true, true, true
		c.Lifecycle.CanSteer, c.Lifecycle.CanStop = true, true
		c.Scopes.CanCreateScopes, c.Scopes.CanManageScopes = true, true
		c.Federation.CanFederate = ptype == TypeSystem
	case TypeGateway:
		c.Messaging.CanReceive = true
		c.Federation.CanFederate = true
	}
	if !fanout {
		c.Observation.CanObserve = false
	}
	c.Streaming.SupportsAck = fanout
	return c
}

// narrow applies the capabilities a participant asked for: a flag it set
// to false is withdrawn; asking for more than its type allows grants
// nothing extra (no escalation). The object is read leniently (the schema
// closes it, the SDK adds groups, map-protocol.md §3.2): unknown groups,
// unknown flags and non-boolean values are ignored.
func (c *Capabilities) narrow(raw json.RawMessage) {
	var groups map[string]json.RawMessage
	if json.Unmarshal(raw, &groups) != nil {
		return
	}
	off := func(group, flag string, dst *bool) {
		var flags map[string]json.RawMessage
		if json.Unmarshal(groups[group], &flags) != nil {
			return
		}
		if string(bytes.TrimSpace(flags[flag])) == "false" {
			*dst = false
		}
	}
	off("observation", "canObserve", &c.Observation.CanObserve)
	off("observation", "canQuery", &c.Observation.CanQuery)
	off("messaging", "canSend", &c.Messaging.CanSend)
	off("messaging", "canReceive", &c.Messaging.CanReceive)
	off("messaging", "canBroadcast", &c.Messaging.CanBroadcast)
	off("lifecycle", "canSpawn", &c.Lifecycle.CanSpawn)
	off("lifecycle", "canRegister", &c.Lifecycle.CanRegister)
	off("lifecycle", "canUnregister", &c.Lifecycle.CanUnregister)
	off("lifecycle", "canSteer", &c.Lifecycle.CanSteer)
	off("lifecycle", "canStop", &c.Lifecycle.CanStop)
	off("scopes", "canCreateScopes", &c.Scopes.CanCreateScopes)
	off("scopes", "canManageScopes", &c.Scopes.CanManageScopes)
	off("federation", "canFederate", &c.Federation.CanFederate)
}

func validParticipantType(t string) bool {
	switch t {
	case TypeAgent, TypeClient, TypeSystem, TypeGateway:
		return true
	}
	return false
}

// flags maps each capability flag's name ("group.flag") to its field.
func (c *Capabilities) flags() map[string]*bool {
	return map[string]*bool{
		"observation.canObserve":  &c.Observation.CanObserve,
		"observation.canQuery":    &c.Observation.CanQuery,
		"messaging.canSend":       &c.Messaging.CanSend,
		"messaging.canReceive":    &c.Messaging.CanReceive,
		"messaging.canBroadcast":  &c.Messaging.CanBroadcast,
		"lifecycle.canSpawn":      &c.Lifecycle.CanSpawn,
		"lifecycle.canRegister":   &c.Lifecycle.CanRegister,
		"lifecycle.canUnregister": &c.Lifecycle.CanUnregister,
		"lifecycle.canSteer":      &c.Lifecycle.CanSteer,
		"lifecycle.canStop":       &c.Lifecycle.CanStop,
		"scopes.canCreateScopes":  &c.Scopes.CanCreateScopes,
		"scopes.canManageScopes":  &c.Scopes.CanManageScopes,
		"federation.canFederate":  &c.Federation.CanFederate,
	}
}

// KnownCapability reports whether name is a capability flag a credential
// can grant ("lifecycle.canStop", ...).
func KnownCapability(name string) bool {
	_, ok := (&Capabilities{}).flags()[name]
	return ok
}

// restrict withdraws every flag not in allowed: a credential grants at
// most what it lists, and never more than the participant type allows.
func (c *Capabilities) restrict(allowed []string) {
	for name, f := range c.flags() {
		if !slices.Contains(allowed, name) {
			*f = false
		}
	}
}
