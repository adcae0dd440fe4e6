package registry

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// moduleName is persisted in snapshots; never change it.
const moduleName = "registry"

// State is the replicated registry: agents, scopes, sessions with their
// subscriptions, and the retained event log window. It implements
// raftstore.Module (commands arrive on raft's FSM goroutine) and Reader
// (safe from any goroutine; readers get copies).
//
// Entries are copy-on-write: Apply never modifies an entry, slice or byte
// array reachable from the maps; it stores a modified copy instead. That is
// what lets Snapshot copy only the maps, and Reader methods hand out
// shallow copies whose raw JSON fields share immutable bytes (callers must
// not modify returned json.RawMessage contents).
type State struct {
	log      *slog.Logger
	window   int
	roles    map[string]json.RawMessage // Config.RolePermissions, read-only
	build    int                        // the FSM level enforced (FSMLevel or Config.BuildFSMLevel)
	handlers map[concordv1.CommandType]raftstore.Handler
	checks   map[concordv1.CommandType]func(*data, proto.Message) error

	mu     sync.RWMutex // guards d, notify and tx
	d      *data
	notify chan struct{} // closed and replaced when events are appended
	// notifyTaken: Notify handed out notify since it was made. Until
	// then nobody can be waiting on it, so wake leaves it open: raft
	// applies a batch of entries in a row, and the watchers take a new
	// channel only after the batch (WaitApplyBatch), so most applies
	// would close and make a channel nobody holds. Set under the read
	// lock by any reader, hence atomic.
	notifyTaken atomic.Bool
	tx          txn // the command being applied (begin)
	// updates: AGENT_UPDATE bodies reused from one entry to the next
	// (reuse.go).
	updates updateBodies
}

// agentEntry is an Agent plus the replicated fields the contract type does
// not expose.
type agentEntry struct {
	a                 Agent
	stateBeforeOrphan string
	persistentID      string
}

// sessionEntry is a Session plus its replicated bookkeeping.
type sessionEntry struct {
	s         Session
	epoch     uint64
	ttlMs     int64
	graceDone bool
}

// data is the whole replicated state; Restore builds a new one and swaps.
type data struct {
	agents map[string]*agentEntry
	// bySession indexes agents by Agent.SessionID (derived; rebuilt by
	// Restore, not persisted). Always change agents via putAgent/delAgent.
	bySession map[string]map[string]struct{}
	scopes    map[string]*Scope
	// sessions: always change via putSession/delSession, which keep
	// subsOnNode, detached and moves current.
	sessions map[string]*sessionEntry
	// detached indexes the sessions that are not connected (derived):
	// only they can have an expiry due, so the leader's expiry sweep
	// costs the detached sessions, not all of them.
	detached map[string]struct{}
	// moves counts re-attaches of an existing session and detaches
	// proposed by a node other than the session's home, and detaches
	// counts entries stored detached (both derived, never persisted; see
	// SessionChanges).
	moves, detaches uint64
	// gen counts changes to sessions and agents (derived, never
	// persisted): DueExpiries' shortcut holds only while it is unchanged.
	// expNext is the earliest pending expiry the last walk saw and expGen
	// the gen it saw; readers store them under the read lock, hence atomic.
	gen     uint64
	expNext atomic.Int64
	expGen  atomic.Uint64
	// subsOnNode counts the subscriptions of sessions attached to each
	// node (derived, like bySession): nodes without any need no copy of
	// ephemeral message events.
	subsOnNode map[string]int
	// connectedOn indexes the connected sessions by home node (derived,
	// like bySession): the reconciler reads the homes every interval and
	// the sessions of a departed home only, not a copy of all of them.
	connectedOn map[string]map[string]struct{}
	events      eventLog
	// systemLevel is the FSM level recorded by SYSTEM_FSM_LEVEL
	// (apply_level.go); persisted in the snapshot header.
	systemLevel uint32
	// drains are the drain admissions recorded by DRAIN_ADMIT and not yet
	// released, by node id, and drainAdmitIndex the index of the last
	// DRAIN_ADMIT applied (apply_drain.go); both persisted in the
	// snapshot header.
	drains          map[string]DrainAdmission
	drainAdmitIndex uint64
}

func newData(window int) *data {
	return &data{
		agents:      map[string]*agentEntry{},
		bySession:   map[string]map[string]struct{}{},
		scopes:      map[string]*Scope{},
		sessions:    map[string]*sessionEntry{},
		detached:    map[string]struct{}{},
		subsOnNode:  map[string]int{},
		connectedOn: map[string]map[string]struct{}{},
		events:      newEventLog(window),
		drains:      map[string]DrainAdmission{},
	}
}

// putSession stores a session entry, keeping the derived indexes current.
func (d *data) putSession(e *sessionEntry) {
	d.gen++
	old, ok := d.sessions[e.s.ID]
	// Most changes (a cursor, a subscription's options) leave what the
	// indexes count alone; undoing and redoing them would be a no-op that
	// costs map writes (and a new set for a node's only session).
	reindex := !ok || old.s.HomeNode != e.s.HomeNode || old.s.Connected != e.s.Connected ||
		len(old.s.Subscriptions) != len(e.s.Subscriptions)
	if ok {
		if reindex {
			d.countSubs(&old.s, -1)
			d.indexConnected(&old.s, false)
		}
		if e.s.Connected && e.epoch != old.epoch {
			d.moves++
		}
	}
	d.sessions[e.s.ID] = e
	if reindex {
		d.countSubs(&e.s, 1)
		d.indexConnected(&e.s, true)
	}
	if e.s.Connected {
		delete(d.detached, e.s.ID)
	} else {
		d.detached[e.s.ID] = struct{}{}
		d.detaches++
	}
}

// delSession removes a session entry, keeping the derived indexes current.
func (d *data) delSession(id string) {
	d.gen++
	if old, ok := d.sessions[id]; ok {
		d.countSubs(&old.s, -1)
		d.indexConnected(&old.s, false)
		delete(d.sessions, id)
		delete(d.detached, id)
	}
}

// indexConnected adds (add) or removes a connected session's entry in
// connectedOn; a detached session or one without a home is not indexed.
func (d *data) indexConnected(s *Session, add bool) {
	if !s.Connected || s.HomeNode == "" {
		return
	}
	ids := d.connectedOn[s.HomeNode]
	if add {
		if ids == nil {
			ids = map[string]struct{}{}
			d.connectedOn[s.HomeNode] = ids
		}
		ids[s.ID] = struct{}{}
		return
	}
	delete(ids, s.ID)
	if len(ids) == 0 {
		delete(d.connectedOn, s.HomeNode)
	}
}

func (d *data) countSubs(s *Session, sign int) {
	if s.HomeNode == "" || len(s.Subscriptions) == 0 {
		return
	}
	n := d.subsOnNode[s.HomeNode] + sign*len(s.Subscriptions)
	if n <= 0 {
		delete(d.subsOnNode, s.HomeNode)
		return
	}
	d.subsOnNode[s.HomeNode] = n
}

// putAgent stores an agent entry and keeps the session index current.
func (d *data) putAgent(e *agentEntry) {
	d.gen++
	old, ok := d.agents[e.a.ID]
	if ok && old.a.SessionID != e.a.SessionID {
		d.unindex(old.a.SessionID, e.a.ID)
	}
	d.agents[e.a.ID] = e
	if ok && old.a.SessionID == e.a.SessionID {
		return // indexed already (an update)
	}
	if sid := e.a.SessionID; sid != "" {
		set := d.bySession[sid]
		if set == nil {
			set = map[string]struct{}{}
			d.bySession[sid] = set
		}
		set[e.a.ID] = struct{}{}
	}
}

// delAgent removes an agent entry and its index entry.
func (d *data) delAgent(id string) {
	d.gen++
	if old, ok := d.agents[id]; ok {
		d.unindex(old.a.SessionID, id)
		delete(d.agents, id)
	}
}

func (d *data) unindex(sid, id string) {
	if set := d.bySession[sid]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(d.bySession, sid)
		}
	}
}

// sessionAgents returns the ids of the agents whose SessionID is sid,
// sorted.
func (d *data) sessionAgents(sid string) []string {
	return sortedKeys(d.bySession[sid])
}

var _ raftstore.Module = (*State)(nil)
var _ Reader = (*State)(nil)

// New builds an empty State. The command table is built here.
func New(cfg Config) (*State, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &State{
		log:    lg.With("component", "registry"),
		window: cfg.EventWindow,
		roles:  maps.Clone(cfg.RolePermissions),
		build:  cfg.BuildFSMLevel,
		d:      newData(cfg.EventWindow),
		notify: make(chan struct{}),
	}
	// Each command's domain check (validate.go) runs before its apply
	// function, in Apply and in Check.
	s.checks = map[concordv1.CommandType]func(*data, proto.Message) error{
		concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER:      checkFunc(checkAgentRegister),
		concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER:    checkFunc(checkAgentUnregister),
		concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE:        checkFunc(checkAgentUpdate),
		concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN:        checkFunc(checkSessionOpen),
		concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE:      checkFunc(checkSessionExpire),
		concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD:    checkFunc(checkSubscriptionAdd),
		concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_REMOVE: checkFunc(checkSubscriptionRemove),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE:        checkFunc(checkScopeCreate),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE:        checkFunc(checkScopeDelete),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN:          checkFunc(checkScopeJoin),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE:         checkFunc(checkScopeLeave),
	}
	s.handlers = map[concordv1.CommandType]raftstore.Handler{}
	for t, c := range map[concordv1.CommandType]command{
		concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER:      commandOf(s.applyAgentRegister),
		concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER:    commandOf(s.applyAgentUnregister),
		concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE:        commandOf(s.applyAgentUpdate),
		concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN:        commandOf(s.applySessionOpen),
		concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE:       commandOf(s.applySessionClose),
		concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH:      commandOf(s.applySessionDetach),
		concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE:      commandOf(s.applySessionExpire),
		concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_ADD:    commandOf(s.applySubscriptionAdd),
		concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_REMOVE: commandOf(s.applySubscriptionRemove),
		concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_CURSOR: commandOf(s.applySubscriptionCursor),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE:        commandOf(s.applyScopeCreate),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE:        commandOf(s.applyScopeDelete),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN:          commandOf(s.applyScopeJoin),
		concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE:         commandOf(s.applyScopeLeave),
	} {
		c.decode = bodyDecoders[t]
		if t == concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE {
			c.decode, c.release = s.updates.decode, s.updates.release
		}
		s.handlers[t] = s.handler(t, c)
	}
	s.handlers[concordv1.CommandType_COMMAND_TYPE_SYSTEM_FSM_LEVEL] = s.levelHandler()
	s.handlers[concordv1.CommandType_COMMAND_TYPE_DRAIN_ADMIT] = s.drainAdmitHandler()
	s.handlers[concordv1.CommandType_COMMAND_TYPE_DRAIN_RELEASE] = s.drainReleaseHandler()
	return s, nil
}

// metaCarrier is implemented by every registry command message.
type metaCarrier interface {
	proto.Message
	GetMeta() *concordv1.CommandMeta
}

// command is one command type's body constructor and apply function.
type command struct {
	new   func() proto.Message
	apply func(*txn, proto.Message) (any, error)
	// decode, when set, is the type's hand decoder (decode.go).
	decode func([]byte) (proto.Message, error)
	// release, when set, is told that Apply is done with the message
	// (reuse.go).
	release func(proto.Message)
}

// commandOf erases the message type of an apply function. Its body
// constructor is a plain new(T): every replica calls it for every entry,
// and the protobuf reflection constructor costs a reflect.New on top.
func commandOf[T any, M interface {
	*T
	metaCarrier
}](fn func(tx *txn, m M) (any, error)) command {
	return command{
		new: func() proto.Message { return M(new(T)) },
		apply: func(tx *txn, msg proto.Message) (any, error) {
			m, ok := msg.(M)
			if !ok {
				// The FSM decoded a body of the wrong type: a programming
				// error in the routing table, not a domain error.
				panic(fmt.Sprintf("registry: handler got unexpected message type %T", msg))
			}
			return fn(tx, m)
		},
	}
}

// handler builds the raftstore.Handler of one command type. It holds the
// write lock for the whole command, runs the check, then the apply
// function, and appends the events it produced only on success, then
// wakes readers. Checks run before any mutation, so an error leaves the
// state unchanged.
func (s *State) handler(t concordv1.CommandType, c command) raftstore.Handler {
	check := s.checks[t]
	return raftstore.Handler{
		New:    c.new,
		Decode: c.decode,
		Apply: func(index uint64, msg proto.Message) (any, error) {
			mc, ok := msg.(metaCarrier)
			if !ok {
				panic(fmt.Sprintf("registry: unexpected message type %T", msg))
			}
			res, err := s.apply(index, mc, check, c.apply)
			if c.release != nil {
				c.release(msg)
			}
			return res, err
		},
	}
}

// apply runs one command under the write lock (see handler).
func (s *State) apply(index uint64, msg metaCarrier, check func(*data, proto.Message) error,
	apply func(*txn, proto.Message) (any, error)) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if check != nil {
		if err := check(s.d, msg); err != nil {
			return nil, err
		}
	}
	tx := s.begin(index, msg.GetMeta())
	res, err := apply(tx, msg)
	if err != nil {
		return nil, err
	}
	if s.d.events.appendAll(tx.pending) > 0 {
		s.wake()
	}
	return res, nil
}

// Name implements raftstore.Module.
func (s *State) Name() string { return moduleName }

// Handlers implements raftstore.Module.
func (s *State) Handlers() map[concordv1.CommandType]raftstore.Handler {
	return s.handlers
}

// ---- Reader -----------------------------------------------------------

// Agent returns a copy of one agent.
func (s *State) Agent(id string) (Agent, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.d.agents[id]
	if !ok {
		return Agent{}, false
	}
	return copyAgent(&e.a), true
}

// Agents returns all agents sorted by id.
func (s *State) Agents() []Agent {
	return s.AgentsWhere(nil)
}

// AgentsWhere returns the agents for which pred (nil = all) returns true,
// sorted by id. pred runs under the read lock: it must not call back into
// the State.
func (s *State) AgentsWhere(pred func(*Agent) bool) []Agent {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Agent, 0, len(s.d.agents))
	for _, id := range sortedKeys(s.d.agents) {
		a := copyAgent(&s.d.agents[id].a)
		if pred == nil || pred(&a) {
			out = append(out, a)
		}
	}
	return out
}

// Children returns the agents whose parent is parentID, sorted by id.
func (s *State) Children(parentID string) []Agent {
	return s.AgentsWhere(func(a *Agent) bool { return a.Parent == parentID })
}

// Scope returns a copy of one scope.
func (s *State) Scope(id string) (Scope, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sc, ok := s.d.scopes[id]
	if !ok {
		return Scope{}, false
	}
	return copyScope(sc), true
}

// Scopes returns all scopes sorted by id.
func (s *State) Scopes() []Scope {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Scope, 0, len(s.d.scopes))
	for _, id := range sortedKeys(s.d.scopes) {
		out = append(out, copyScope(s.d.scopes[id]))
	}
	return out
}

// HasSubscriptionsOn reports whether any session attached to nodeID holds
// a subscription: whether that node could want a copy of an ephemeral
// event (message_sent and the like, which are not in the replicated log).
func (s *State) HasSubscriptionsOn(nodeID string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.subsOnNode[nodeID] > 0
}

// RolePermissions returns the configured permissions of role (nil when
// none); it implements access.RoleReader.
func (s *State) RolePermissions(role string) json.RawMessage {
	return s.roles[role]
}

// Session returns a copy of one session (with its subscriptions).
func (s *State) Session(id string) (Session, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.d.sessions[id]
	if !ok {
		return Session{}, false
	}
	return copySession(&e.s), true
}

// Sessions returns all sessions sorted by id.
func (s *State) Sessions() []Session {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Session, 0, len(s.d.sessions))
	for _, id := range sortedKeys(s.d.sessions) {
		out = append(out, copySession(&s.d.sessions[id].s))
	}
	return out
}

// HomedSession is a connected session homed on a node, at its attach
// epoch (see SessionEpoch).
type HomedSession struct {
	ID    string
	Epoch uint64
}

// ConnectedOn returns the connected sessions homed on nodeID, unordered.
// It copies no session and visits only those (the connectedOn index), so
// a node can check its own every second.
func (s *State) ConnectedOn(nodeID string) []HomedSession {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := s.d.connectedOn[nodeID]
	out := make([]HomedSession, 0, len(ids))
	for id := range ids {
		out = append(out, HomedSession{ID: id, Epoch: s.d.sessions[id].epoch})
	}
	return out
}

// ConnectedHomes returns the home nodes of the connected sessions,
// sorted. O(homes), so a periodic caller pays for the nodes, not for
// every session.
func (s *State) ConnectedHomes() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedKeys(s.d.connectedOn)
}

// ConnectedSessionsOn returns the connected sessions whose home is
// nodeID, sorted by id. O(k) in those sessions.
func (s *State) ConnectedSessionsOn(nodeID string) []Session {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := s.d.connectedOn[nodeID]
	out := make([]Session, 0, len(ids))
	for _, id := range sortedKeys(ids) {
		out = append(out, copySession(&s.d.sessions[id].s))
	}
	return out
}

// SessionAgents returns the agents whose SessionID is sessionID (owned,
// or orphaned by it and not reclaimed since), sorted by id. O(k) in the
// session's agents, so suitable for hot paths (map/send sender lookup).
func (s *State) SessionAgents(sessionID string) []Agent {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := s.d.sessionAgents(sessionID)
	out := make([]Agent, 0, len(ids))
	for _, id := range ids {
		out = append(out, copyAgent(&s.d.agents[id].a))
	}
	return out
}

// SpeakerAgent returns the agent a session's participant speaks for when
// it sends: among the session's agents that have an owner, the one whose
// id is participantID, else the only one, else "". It is SessionAgents
// without the copies, for map/send's hot path.
func (s *State) SpeakerAgent(sessionID, participantID string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	only, owned := "", 0
	for id := range s.d.bySession[sessionID] {
		if s.d.agents[id].a.OwnerID == "" {
			continue
		}
		if id == participantID {
			return id
		}
		only = id
		owned++
	}
	if owned == 1 {
		return only
	}
	return ""
}

// SessionAgentIDs returns the ids of the agents a session owns, sorted:
// the agents whose permissions bound what its participant may see and
// message (node/access). Cheaper than SessionAgents (no copies).
func (s *State) SessionAgentIDs(sessionID string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for id := range s.d.bySession[sessionID] {
		if s.d.agents[id].a.OwnerID != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Attachment is where a session is attached and at which epoch: what a
// node compares with its open connections, without a copy of the session.
type Attachment struct {
	Epoch     uint64
	Connected bool
	HomeNode  string
	Closed    bool
}

// SessionAttachment returns a session's Attachment. It copies nothing, so
// a pass over every local connection (the MAP layer's closeLost) costs a
// map lookup each.
func (s *State) SessionAttachment(id string) (Attachment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.d.sessions[id]
	if !ok {
		return Attachment{}, false
	}
	return Attachment{Epoch: e.epoch, Connected: e.s.Connected, HomeNode: e.s.HomeNode, Closed: e.s.ClosedAt != 0}, true
}

// SessionEpoch returns the attach epoch of a session: it increases at every
// open, resume, detach and close. The MAP layer records the epoch its
// connection attached at and puts it in SESSION_DETACH/CLOSE so that a
// stale detach (the session moved to another connection) is ignored.
func (s *State) SessionEpoch(id string) (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.d.sessions[id]
	if !ok {
		return 0, false
	}
	return e.epoch, true
}

// EventsAfter returns up to limit retained events with Position > pos.
func (s *State) EventsAfter(pos uint64, limit int) []Event {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.events.after(pos, limit)
}

// PositionOf finds a retained event by id.
func (s *State) PositionOf(eventID string) (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.events.position(eventID)
}

// Window reports the oldest retained position and the last position
// (0, 0 before the first event).
func (s *State) Window() (oldest, last uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.events.oldest(), s.d.events.last
}

// SessionChanges returns two counters for the MAP layer's background loop,
// which wakes on every registry event but has work only after some:
//   - moves counts the re-attaches of existing sessions (a resume, here
//     or on another node) and the detaches another node proposed for a
//     session's home (the leader's, for a node it saw fail): only they
//     can take a session away from a node's open connection;
//   - detaches counts sessions stored detached (a detach, close, or
//     expired grace period): only they can add an expiry deadline.
//
// A snapshot restore changes both. Compare with earlier values only.
func (s *State) SessionChanges() (moves, detaches uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.moves, s.d.detaches
}

// Notify returns a channel closed when the next event is appended (or the
// state is replaced by Restore). Take a fresh channel after each wake-up.
func (s *State) Notify() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.notifyTaken.Store(true)
	return s.notify
}

// wake closes the Notify channel, if anyone took it, and makes the next
// one. Must be called with s.mu held for writing.
func (s *State) wake() {
	if !s.notifyTaken.Load() {
		return
	}
	close(s.notify)
	s.notify = make(chan struct{})
	s.notifyTaken.Store(false)
}

// ---- helpers ----------------------------------------------------------

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func copyAgent(a *Agent) Agent {
	c := *a
	c.Scopes = slices.Clone(a.Scopes)
	return c
}

func copyScope(sc *Scope) Scope {
	c := *sc
	c.AutoJoinRoles = slices.Clone(sc.AutoJoinRoles)
	c.Members = slices.Clone(sc.Members)
	return c
}

func copySession(se *Session) Session {
	c := *se
	c.ResumeTokenHash = slices.Clone(se.ResumeTokenHash)
	c.Subscriptions = slices.Clone(se.Subscriptions)
	return c
}

// insertSorted returns a new sorted slice with v added (no duplicates).
func insertSorted(list []string, v string) []string {
	i, found := slices.BinarySearch(list, v)
	if found {
		return list
	}
	out := make([]string, 0, len(list)+1)
	out = append(out, list[:i]...)
	out = append(out, v)
	return append(out, list[i:]...)
}

// removeValue returns a new slice without v (order kept).
func removeValue(list []string, v string) []string {
	out := make([]string, 0, len(list))
	for _, x := range list {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}
