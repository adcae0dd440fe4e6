package registry

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/oklog/ulid/v2"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// MAP event type names emitted by Apply (snake_case, map-protocol.md §5.5).
const (
	EventAgentRegistered         = "agent_registered"
	EventAgentUnregistered       = "agent_unregistered"
	EventAgentStateChanged       = "agent_state_changed"
	EventAgentEnvironmentChanged = "agent_environment_changed"
	EventAgentOrphaned           = "agent_orphaned"
	EventParticipantConnected    = "participant_connected"
	EventParticipantDisconnected = "participant_disconnected"
	EventScopeCreated            = "scope_created"
	EventScopeDeleted            = "scope_deleted"
	EventScopeMemberJoined       = "scope_member_joined"
	EventScopeMemberLeft         = "scope_member_left"
	// EventPermissionsAgentUpdated: an agent's permissionOverrides changed
	// (the SDK's permissions_agent_updated).
	EventPermissionsAgentUpdated = "permissions_agent_updated"
)

// txn is the context of one Apply: the command's time, its event id
// supply, and the events produced so far (appended only on success).
type txn struct {
	d       *data
	index   uint64
	ts      int64
	source  string
	nodeID  string
	ids     []string
	nextID  int // ids[:nextID] are consumed
	parsed  int // ids[:parsed] are accounted for in lastID (lastFromIDs)
	lastID  ulid.ULID
	haveID  bool
	pending []Event
	// The ids given out by this txn: the first few in takenFew (comparing
	// a handful of strings beats hashing into a map), the rest in taken,
	// made when needed.
	takenFew [4]string
	nFew     int
	taken    map[string]struct{}
}

// Bounds on what the State's reused txn keeps between commands: a command
// that produced more events (a session closing with many agents) leaves
// its larger slice and map to the GC instead of holding them for good.
const (
	keepPendingCap = 16
	keepTakenLen   = 16
)

// begin makes s.tx the context of the command at index and returns it.
// One txn serves every command, so Apply allocates none: the caller holds
// s.mu for the whole command, and nothing keeps the txn or its slices
// after it (appendAll copies the pending events). Must be called with
// s.mu held for writing.
func (s *State) begin(index uint64, meta *concordv1.CommandMeta) *txn {
	pending, taken := s.tx.pending, s.tx.taken
	if cap(pending) > keepPendingCap {
		pending = nil
	}
	// Drop the last command's references: its events are pending[:len],
	// everything past len was cleared by an earlier begin or never used.
	clear(pending)
	if len(taken) > keepTakenLen {
		taken = nil
	}
	clear(taken)
	s.tx = txn{
		d:       s.d,
		index:   index,
		ts:      meta.GetTimestampMs(),
		source:  meta.GetSource(),
		nodeID:  meta.GetNodeId(),
		ids:     meta.GetEventIds(),
		pending: pending[:0],
		taken:   taken,
	}
	return &s.tx
}

// eventID returns the next event id: the proposer's ids in order, then ids
// derived deterministically from the last one (its 80-bit entropy plus
// one), or, when the proposer sent none, from the command time and the
// Raft index. Ids already in the window are skipped, so a replayed command
// or a buggy proposer cannot create duplicate ids.
func (t *txn) eventID() string {
	for t.nextID < len(t.ids) {
		id := t.ids[t.nextID]
		t.nextID++
		if id != "" && !t.used(id) {
			return t.take(id)
		}
	}
	t.lastFromIDs()
	if !t.haveID {
		var u ulid.ULID
		ms := max(t.ts, 0)
		if uint64(ms) > ulid.MaxTime() {
			ms = int64(ulid.MaxTime())
		}
		_ = u.SetTime(uint64(ms))
		var entropy [10]byte
		binary.BigEndian.PutUint64(entropy[2:], t.index)
		_ = u.SetEntropy(entropy[:])
		t.lastID, t.haveID = u, true
		if id := u.String(); !t.used(id) {
			return t.take(id)
		}
	}
	for {
		incEntropy(&t.lastID)
		if id := t.lastID.String(); !t.used(id) {
			return t.take(id)
		}
	}
}

// lastFromIDs makes the last consumed proposer id that is a ULID the one
// later ids derive from, as if each had been parsed when consumed (only
// a derivation reads lastID, and most commands never need one: they
// bring enough ids). Call it before reading or setting lastID or haveID.
func (t *txn) lastFromIDs() {
	for i := t.nextID - 1; i >= t.parsed; i-- {
		if u, err := ulid.ParseStrict(t.ids[i]); err == nil {
			t.lastID, t.haveID = u, true
			break
		}
	}
	t.parsed = t.nextID
}

func (t *txn) used(id string) bool {
	if slices.Contains(t.takenFew[:t.nFew], id) {
		return true
	}
	if _, ok := t.taken[id]; ok {
		return true
	}
	_, ok := t.d.events.position(id)
	return ok
}

func (t *txn) take(id string) string {
	if t.nFew < len(t.takenFew) {
		t.takenFew[t.nFew] = id
		t.nFew++
		return id
	}
	if t.taken == nil {
		t.taken = make(map[string]struct{}, 4)
	}
	t.taken[id] = struct{}{}
	return id
}

// incEntropy adds one to the 80-bit entropy of u (wrapping).
func incEntropy(u *ulid.ULID) {
	for i := len(u) - 1; i >= 6; i-- {
		u[i]++
		if u[i] != 0 {
			return
		}
	}
}

// emit records an event whose Data is json.Marshal of payload; it returns
// the event id for causedBy links.
func (t *txn) emit(typ string, payload any, agentIDs, scopeIDs []string, causedBy ...string) string {
	raw, err := json.Marshal(payload)
	if err != nil {
		// Payloads are built from registry types that always marshal.
		panic(fmt.Sprintf("registry: marshal %s event: %v", typ, err))
	}
	return t.emitData(typ, raw, agentIDs, scopeIDs, causedBy...)
}

// emitData records an event with its Data already encoded (payloads.go).
func (t *txn) emitData(typ string, data json.RawMessage, agentIDs, scopeIDs []string, causedBy ...string) string {
	ev := Event{
		ID:        t.eventID(),
		Type:      typ,
		Timestamp: t.ts,
		Source:    t.source,
		Data:      data,
		AgentIDs:  sortedUnique(agentIDs),
		ScopeIDs:  sortedUnique(scopeIDs),
	}
	if len(causedBy) > 0 {
		ev.CausedBy = slices.Clone(causedBy)
	}
	t.pending = append(t.pending, ev)
	return ev.ID
}

func sortedUnique(in []string) []string {
	switch len(in) {
	case 0:
		return nil
	case 1: // an event about one agent or scope, the usual case
		return []string{in[0]}
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}
