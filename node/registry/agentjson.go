package registry

import (
	"strconv"

	"github.com/concordmap/concord/node/internal/jsonkit"
)

// AppendJSON appends the MAP Agent object that MarshalJSON renders (the
// same members in the same order, ownerId last and null for an orphan),
// without reflection and with HTML escaping off, the rpc layer's setting
// for results. Raw members are appended as stored: the MAP layer keeps
// them compacted. node/mapsvc answers every agent write with it
// (map/agents/update is the write path's result, once per request).
func (a *Agent) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonkit.AppendString(b, a.ID)
	b = appendOptString(b, `,"name":`, a.Name)
	b = appendOptString(b, `,"description":`, a.Description)
	b = appendOptString(b, `,"role":`, a.Role)
	b = appendOptString(b, `,"parent":`, a.Parent)
	if len(a.Scopes) > 0 {
		b = append(b, `,"scopes":`...)
		b = jsonkit.AppendStrings(b, a.Scopes)
	}
	b = append(b, `,"state":`...)
	b = jsonkit.AppendString(b, a.State)
	b = appendOptString(b, `,"visibility":`, a.Visibility)
	b = append(b, `,"lifecycle":{`...)
	lc, n := a.Lifecycle, len(b)
	b = appendOptInt(b, `"createdAt":`, lc.CreatedAt)
	b = appendOptInt(b, `"startedAt":`, lc.StartedAt)
	b = appendOptInt(b, `"stoppedAt":`, lc.StoppedAt)
	b = appendOptInt(b, `"lastActiveAt":`, lc.LastActiveAt)
	b = appendOptInt(b, `"orphanedAt":`, lc.OrphanedAt)
	if lc.ExitReason != "" {
		b = append(b, `"exitReason":`...)
		b = jsonkit.AppendString(b, lc.ExitReason)
		b = append(b, ',')
	}
	if len(b) > n {
		b = b[:len(b)-1] // the last member's comma
	}
	b = append(b, '}')
	for _, m := range [...]struct {
		key string
		raw []byte
	}{
		{`,"capabilities":`, a.Capabilities}, {`,"capabilityDescriptor":`, a.CapabilityDescriptor},
		{`,"environment":`, a.Environment}, {`,"metadata":`, a.Metadata},
		{`,"permissionOverrides":`, a.PermissionOverrides}, {`,"persistentIdentity":`, a.PersistentIdentity},
		{`,"relationships":`, a.Relationships}, {`,"_meta":`, a.Meta},
	} {
		if len(m.raw) > 0 {
			b = append(append(b, m.key...), m.raw...)
		}
	}
	b = append(b, `,"ownerId":`...)
	if a.OwnerID == "" {
		b = append(b, "null"...)
	} else {
		b = jsonkit.AppendString(b, a.OwnerID)
	}
	return append(b, '}')
}

// appendOptString appends key and s unless s is empty (omitempty).
func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return jsonkit.AppendString(append(b, key...), s)
}

// appendOptInt appends key, v and a comma unless v is 0 (omitempty).
func appendOptInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return append(strconv.AppendInt(append(b, key...), v, 10), ',')
}
