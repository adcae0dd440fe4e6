package acl

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Participant capability ceilings and client permissions
// (map/permissions/update): the system withdraws capability flags and
// actions ("actions.sendMessages") from a participant and sets its limits; node/mapsvc narrows
// every session of that participant by them at each call, so a change
// applied from Raft holds on every node at once.

// maxDenied bounds a record (there are a dozen flags; the rest is junk).
const maxDenied = 64

func (m *Module) applyPermissionsUpdate(index uint64, u *concordv1.AclPermissionsUpdate) (any, error) {
	if m.origins != nil {
		// First, as the registry's checkOrigin: whatever else the update
		// would meet, its connection no longer holds the session.
		if err := m.origins.CheckOrigin(u.GetOriginSessionId(), u.GetOriginSessionEpoch()); err != nil {
			return nil, err
		}
	}
	pid := u.GetParticipantId()
	if pid == "" || len(pid) > 256 {
		return nil, fmt.Errorf("%w: participant_id is required (at most 256 bytes)", ErrInvalidKey)
	}
	for _, f := range append(slices.Clone(u.GetDeny()), u.GetAllow()...) {
		if !mapsvc.KnownPermission(f) {
			return nil, fmt.Errorf("%w: unknown capability %s", ErrInvalidKey, f)
		}
	}
	for name, v := range u.GetLimits() {
		if !mapsvc.KnownLimit(name) || v < -1 || v > mapsvc.MaxLimit {
			return nil, fmt.Errorf("%w: bad limit %s=%d", ErrInvalidKey, name, v)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var denied []string
	limits := map[string]int64{}
	var curVis []byte
	if cur, ok := m.perms[pid]; ok {
		denied = slices.Clone(cur.GetDenied())
		maps.Copy(limits, cur.GetLimits())
		curVis = cur.GetVisibility()
	}
	vis, visBytes, err := mergeVisibility(curVis, u.GetVisibility())
	if err != nil {
		return nil, err
	}
	for name, v := range u.GetLimits() {
		if v < 0 {
			delete(limits, name)
		} else {
			limits[name] = v
		}
	}
	denied = append(denied, u.GetDeny()...)
	denied = slices.DeleteFunc(denied, func(f string) bool { return slices.Contains(u.GetAllow(), f) })
	slices.Sort(denied)
	denied = slices.Compact(denied)
	if len(denied) > maxDenied {
		return nil, fmt.Errorf("%w: too many denied capabilities", ErrInvalidKey)
	}
	if len(limits) == 0 {
		limits = nil
	}
	rec := &concordv1.AclParticipantPermissions{ParticipantId: pid, Denied: denied,
		UpdatedMs: u.GetTimestampMs(), UpdatedBy: u.GetUpdatedBy(), Limits: limits, Visibility: visBytes}
	if len(denied) == 0 && len(limits) == 0 && vis == nil {
		delete(m.perms, pid)
		delete(m.vis, pid)
	} else {
		m.perms[pid] = rec
		m.vis[pid] = vis
		if vis == nil {
			delete(m.vis, pid)
		}
	}
	m.announce()
	if m.events != nil {
		data, _ := json.Marshal(map[string]any{"clientId": pid, "updatedBy": u.GetUpdatedBy(),
			"changes": map[string]any{"deny": nonNil(u.GetDeny()), "allow": nonNil(u.GetAllow()), "limits": u.GetLimits()},
			"denied":  nonNil(denied), "limits": limits})
		m.events.AppendEvents(index, []registry.Event{{Type: EventPermissionsClientUpdated, Timestamp: u.GetTimestampMs(),
			Source: u.GetUpdatedBy(), Data: data}})
	}
	return proto.CloneOf(rec), nil
}

// EventPermissionsClientUpdated is the MAP event of a ceiling change (the
// SDK's permissions_client_updated).
const EventPermissionsClientUpdated = "permissions_client_updated"

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Denied returns the capability flags withdrawn from a participant (nil
// when none). It implements mapsvc.ParticipantPermissions.
func (m *Module) Denied(participantID string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r, ok := m.perms[participantID]; ok {
		return r.GetDenied() // records are immutable once stored
	}
	return nil
}

// Limits returns a participant's client-permission limits (nil when
// none). It implements mapsvc.ParticipantPermissions.
func (m *Module) Limits(participantID string) map[string]int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r, ok := m.perms[participantID]; ok {
		return r.GetLimits() // records are immutable once stored
	}
	return nil
}

// Visibility returns a participant's client visibility (nil when it
// restricts nothing). It implements mapsvc.ParticipantPermissions.
func (m *Module) Visibility(participantID string) *access.ClientVisibility {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.vis[participantID] // immutable once stored
}

// mergeVisibility overlays the keys of update on the stored client
// visibility cur and returns the result parsed (nil when it restricts
// nothing) and canonical (nil likewise).
func mergeVisibility(cur, update []byte) (*access.ClientVisibility, []byte, error) {
	fields := map[string]json.RawMessage{}
	for _, b := range [][]byte{cur, update} {
		if len(b) == 0 {
			continue
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, nil, fmt.Errorf("%w: visibility must be a JSON object", ErrInvalidKey)
		}
		maps.Copy(fields, f)
	}
	raw, _ := json.Marshal(fields)
	v, err := access.ParseClientVisibility(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: visibility: %v", ErrInvalidKey, err)
	}
	if v.Unrestricted() {
		return nil, nil, nil
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("encode visibility: %w", err)
	}
	return &v, canon, nil
}

// parsedVisibility rebuilds the parsed client visibility of restored
// records; a record that no longer parses restricts nothing.
func parsedVisibility(perms map[string]*concordv1.AclParticipantPermissions) map[string]*access.ClientVisibility {
	out := map[string]*access.ClientVisibility{}
	for pid, p := range perms {
		if v, _, err := mergeVisibility(nil, p.GetVisibility()); err == nil && v != nil {
			out[pid] = v
		}
	}
	return out
}

func nonEmptyJSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

var _ mapsvc.ParticipantPermissions = (*Module)(nil)
