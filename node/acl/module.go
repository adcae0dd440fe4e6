package acl

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// moduleName is persisted in snapshots; never change it.
const moduleName = "acl"

// Domain errors of the module's commands (returned as values by Apply).
var (
	ErrKeyExists   = errors.New("acl: API key id already exists")
	ErrKeyNotFound = errors.New("acl: API key not found")
	ErrInvalidKey  = errors.New("acl: invalid API key record")
)

// Participant types a key may allow (map-protocol.md §1).
var participantTypes = []string{"agent", "client", "system", "gateway"}

// Module is the replicated state module "acl": the API keys. It
// implements raftstore.Module; Apply, Snapshot and Restore run on raft's
// FSM goroutine, reads (Key, Keys) from any goroutine. Records are never
// mutated once stored, so readers may keep them.
type Module struct {
	mu      sync.RWMutex
	keys    map[string]*concordv1.ApiKey
	perms   map[string]*concordv1.AclParticipantPermissions // by participant id (permissions.go)
	vis     map[string]*access.ClientVisibility             // parsed perms[].visibility
	changed chan struct{}                                   // closed and replaced on every change
	events  EventAppender                                   // optional: permissions_client_updated
	origins SessionOrigins                                  // optional: refuses a moved session's update
}

// EventAppender adds events to the replicated MAP event window;
// *registry.State implements it. It is called from Apply (the FSM
// goroutine), so every replica appends the same events.
type EventAppender interface {
	AppendEvents(index uint64, evs []registry.Event) []registry.Event
}

// WithEvents makes ceiling changes emit permissions_client_updated into
// events (set before the module is registered with the store).
func (m *Module) WithEvents(events EventAppender) *Module {
	m.events = events
	return m
}

// SessionOrigins refuses a write a MAP connection made for its session
// once the session left the attach epoch the connection holds;
// *registry.State implements it (CheckOrigin, with registry's
// ErrSessionMoved). Apply calls it on the FSM goroutine, which applies
// the registry's entries too, so every replica reads the session at the
// same point of the log.
type SessionOrigins interface {
	CheckOrigin(sessionID string, epoch uint64) error
}

// WithSessions makes a permissions update quoting its connection's
// session (origin_session_id, origin_session_epoch; registry
// FSMLevelModuleSessionWrites) apply only while that session is still at
// that epoch. Set it before the module is registered with the store, on
// every replica: without it the quote is not checked.
func (m *Module) WithSessions(origins SessionOrigins) *Module {
	m.origins = origins
	return m
}

var _ raftstore.Module = (*Module)(nil)

// NewModule returns an empty module.
func NewModule() *Module {
	return &Module{keys: map[string]*concordv1.ApiKey{}, perms: map[string]*concordv1.AclParticipantPermissions{},
		vis:     map[string]*access.ClientVisibility{},
		changed: make(chan struct{})}
}

// Changed returns a channel closed at the next change of the keys (a
// create, a revoke or a restore), so open sessions are re-checked at once.
func (m *Module) Changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

// announce wakes Changed waiters; m.mu must be held for writing.
func (m *Module) announce() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Name implements raftstore.Module.
func (m *Module) Name() string { return moduleName }

// Handlers implements raftstore.Module.
func (m *Module) Handlers() map[concordv1.CommandType]raftstore.Handler {
	return map[concordv1.CommandType]raftstore.Handler{
		concordv1.CommandType_COMMAND_TYPE_ACL_KEY_CREATE: {
			New:   func() proto.Message { return &concordv1.AclKeyCreate{} },
			Apply: func(_ uint64, msg proto.Message) (any, error) { return m.applyKeyCreate(msg.(*concordv1.AclKeyCreate)) },
		},
		concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE: {
			New: func() proto.Message { return &concordv1.AclPermissionsUpdate{} },
			Apply: func(index uint64, msg proto.Message) (any, error) {
				return m.applyPermissionsUpdate(index, msg.(*concordv1.AclPermissionsUpdate))
			},
		},
		concordv1.CommandType_COMMAND_TYPE_ACL_KEY_REVOKE: {
			New: func() proto.Message { return &concordv1.AclKeyRevoke{} },
			Apply: func(_ uint64, msg proto.Message) (any, error) {
				return nil, m.applyKeyRevoke(msg.(*concordv1.AclKeyRevoke))
			},
		},
	}
}

func (m *Module) applyKeyCreate(c *concordv1.AclKeyCreate) (any, error) {
	k := c.GetKey()
	if err := ValidateKey(k); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[k.GetId()]; ok {
		return nil, fmt.Errorf("%w: %s", ErrKeyExists, k.GetId())
	}
	m.keys[k.GetId()] = proto.CloneOf(k)
	m.announce()
	return proto.CloneOf(k), nil
}

func (m *Module) applyKeyRevoke(r *concordv1.AclKeyRevoke) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[r.GetId()]; !ok {
		return fmt.Errorf("%w: %s", ErrKeyNotFound, r.GetId())
	}
	delete(m.keys, r.GetId())
	m.announce()
	return nil
}

// ValidateKey reports why k cannot be stored, or nil. The proposer runs it
// too, so a bad request never reaches the log.
func ValidateKey(k *concordv1.ApiKey) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidKey, why) }
	switch {
	case k.GetId() == "":
		return bad("id is required")
	case len(k.GetSecretSha256()) != 32:
		return bad("secret_sha256 must be 32 bytes")
	case !ValidPattern(k.GetParticipantIdPattern()):
		return bad("participant id pattern must be an id, a prefix ending in *, or *")
	case len(k.GetParticipantTypes()) == 0:
		return bad("at least one participant type is required")
	}
	for _, t := range k.GetParticipantTypes() {
		if !slices.Contains(participantTypes, t) {
			return bad("unknown participant type " + t)
		}
	}
	for _, c := range k.GetCapabilities() {
		if !mapsvc.KnownCapability(c) {
			return bad("unknown capability " + c)
		}
	}
	for _, s := range append(slices.Clone(k.GetGatewaySources()), k.GetGatewayTargets()...) {
		if s != "*" && !federation.ValidSystemID(s) {
			return bad("gateway systems must be system ids or *, not " + strconv.Quote(s))
		}
	}
	return nil
}

// ValidPattern reports whether p is a participant id pattern: non-empty,
// with "*" only as the last character.
func ValidPattern(p string) bool {
	if p == "" || len(p) > 256 {
		return false
	}
	i := strings.IndexByte(p, '*')
	return i < 0 || i == len(p)-1
}

// Key returns the key with this id.
func (m *Module) Key(id string) (*concordv1.ApiKey, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	k, ok := m.keys[id]
	return k, ok
}

// Keys returns every key, sorted by id.
func (m *Module) Keys() []*concordv1.ApiKey {
	m.mu.RLock()
	out := make([]*concordv1.ApiKey, 0, len(m.keys))
	for _, k := range m.keys {
		out = append(out, k)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b *concordv1.ApiKey) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out
}

// Snapshot implements raftstore.Module: the sorted key list, then the
// participant ceilings (records are immutable, so sharing them is safe).
func (m *Module) Snapshot() (raftstore.ModuleSnapshot, error) {
	m.mu.RLock()
	perms := make([]*concordv1.AclParticipantPermissions, 0, len(m.perms))
	for _, p := range m.perms {
		perms = append(perms, p)
	}
	m.mu.RUnlock()
	slices.SortFunc(perms, func(a, b *concordv1.AclParticipantPermissions) int {
		return strings.Compare(a.GetParticipantId(), b.GetParticipantId())
	})
	return aclSnapshot{keys: m.Keys(), perms: perms}, nil
}

type aclSnapshot struct {
	keys  []*concordv1.ApiKey
	perms []*concordv1.AclParticipantPermissions
}

// permsTag starts a persisted ceiling record. An ApiKey record never
// starts with 0 (a protobuf tag byte is never 0), so snapshots written
// before ceilings existed restore unchanged.
const permsTag = 0

// SnapshotRecordKind names the kind of one record of this module's
// snapshot, as `concord snapshot inspect` counts them.
func SnapshotRecordKind(data []byte) string {
	if len(data) > 0 && data[0] == permsTag {
		return "participant_permissions"
	}
	return "api_key"
}

func (s aclSnapshot) Persist(write func([]byte) error) error {
	for _, k := range s.keys {
		b, err := proto.Marshal(k)
		if err != nil {
			return fmt.Errorf("encode API key %s: %w", k.GetId(), err)
		}
		if err := write(b); err != nil {
			return err
		}
	}
	for _, p := range s.perms {
		b, err := proto.MarshalOptions{}.MarshalAppend([]byte{permsTag}, p)
		if err != nil {
			return fmt.Errorf("encode permissions of %s: %w", p.GetParticipantId(), err)
		}
		if err := write(b); err != nil {
			return err
		}
	}
	return nil
}

func (s aclSnapshot) Release() {}

// Restore implements raftstore.Module.
func (m *Module) Restore(next func() ([]byte, error)) (func(), error) {
	keys := map[string]*concordv1.ApiKey{}
	perms := map[string]*concordv1.AclParticipantPermissions{}
	for {
		b, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(b) > 0 && b[0] == permsTag {
			p := &concordv1.AclParticipantPermissions{}
			if err := proto.Unmarshal(b[1:], p); err != nil {
				return nil, fmt.Errorf("decode participant permissions: %w", err)
			}
			perms[p.GetParticipantId()] = p
			continue
		}
		k := &concordv1.ApiKey{}
		if err := proto.Unmarshal(b, k); err != nil {
			return nil, fmt.Errorf("decode API key: %w", err)
		}
		keys[k.GetId()] = k
	}
	return func() {
		m.mu.Lock()
		m.keys, m.perms, m.vis = keys, perms, parsedVisibility(perms)
		m.announce()
		m.mu.Unlock()
	}, nil
}
