package acl

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

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
	if cur, ok := m.perms[pid]; ok {
		denied = slices.Clone(cur.GetDenied())
		maps.Copy(limits, cur.GetLimits())
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
		UpdatedMs: u.GetTimestampMs(), UpdatedBy: u.GetUpdatedBy(), Limits: limits}
	if len(denied) == 0 && len(limits) == 0 {
		delete(m.perms, pid)
	} else {
		m.perms[pid] = rec
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

var _ mapsvc.ParticipantPermissions = (*Module)(nil)
