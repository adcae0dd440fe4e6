package mapsvc

import (
	"sync"

	"github.com/concordmap/concord/node/rpc"
)

// connState is the MAP state of one connection, kept in the connection's
// value slot. Handle and Closed run on the connection's reader goroutine;
// mu guards the fields for the Run loop and LocalSessions readers.
type connState struct {
	mu              sync.Mutex
	sessionID       string // "" until map/connect succeeds
	participantID   string
	participantType string
	caps            Capabilities
	epoch           uint64 // attach epoch (registry) of this connection
	resumeToken     string
	principal       *Principal // who authenticated (immutable once set)
	// pendingSession/pendingEpoch record a SESSION_OPEN whose outcome is
	// not known yet (proposal timed out): Closed still detaches it.
	pendingSession string
	pendingEpoch   uint64
	// Credential lifecycle (credentials.go): the expiry already warned
	// about with map/auth/expiring, and, once the credential expired or
	// was revoked, the refusal every call gets and when it was told.
	warnedExpiry int64
	revoked      *rpc.Error
	revokedAt    int64

	// scratch receives the snapshot Handle passes to a method (see
	// handlerSnapshot). Reader goroutine only; not guarded by mu.
	scratch *connState
}

// handlerSnapshot is snapshot into a buffer reused across requests: Handle
// runs one request at a time on the connection's reader goroutine and no
// method keeps the *connState past its return, so a fresh heap copy per
// request (the pointer escapes through the method table) is not needed.
func (cs *connState) handlerSnapshot() *connState {
	if cs.scratch == nil {
		cs.scratch = &connState{}
	}
	out := cs.scratch
	cs.mu.Lock()
	out.sessionID, out.participantID, out.participantType = cs.sessionID, cs.participantID, cs.participantType
	out.caps, out.epoch, out.resumeToken = cs.caps, cs.epoch, cs.resumeToken
	out.principal = cs.principal
	out.pendingSession, out.pendingEpoch = cs.pendingSession, cs.pendingEpoch
	out.warnedExpiry, out.revoked, out.revokedAt = cs.warnedExpiry, cs.revoked, cs.revokedAt
	cs.mu.Unlock()
	return out
}

// snapshot returns a consistent copy of the session fields.
func (cs *connState) snapshot() connState {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return connState{
		sessionID: cs.sessionID, participantID: cs.participantID,
		participantType: cs.participantType, caps: cs.caps, epoch: cs.epoch,
		resumeToken: cs.resumeToken, pendingSession: cs.pendingSession, pendingEpoch: cs.pendingEpoch,
		principal: cs.principal, warnedExpiry: cs.warnedExpiry, revoked: cs.revoked, revokedAt: cs.revokedAt,
	}
}

// attachEpoch returns the attach epoch alone: closeLost reads it for
// every connection, and a whole snapshot is a dozen fields to copy.
func (cs *connState) attachEpoch() uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.epoch
}

// reset returns the connection to the not-connected state.
func (cs *connState) reset() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.sessionID, cs.participantID, cs.participantType = "", "", ""
	cs.caps, cs.epoch, cs.resumeToken = Capabilities{}, 0, ""
	cs.principal = nil
	cs.pendingSession, cs.pendingEpoch = "", 0
	cs.warnedExpiry, cs.revoked, cs.revokedAt = 0, nil, 0
}

// Sessions is the table of sessions attached to this node's live
// connections. It implements the LocalSessions interface of node/router and
// node/fanout. Safe for concurrent use.
type Sessions struct {
	mu   sync.RWMutex
	byID map[string]*attached
	// opening counts, by session id, the local map/connect calls between
	// proposing SESSION_OPEN and putting the session in byID: the
	// registry shows the session connected here before byID does.
	opening map[string]int
}

type attached struct {
	conn  *rpc.Conn
	state *connState
}

// NewSessions returns an empty session table (see Config.Sessions).
func NewSessions() *Sessions {
	return &Sessions{byID: map[string]*attached{}, opening: map[string]int{}}
}

// Conn returns the live connection of a session attached to this node.
func (s *Sessions) Conn(sessionID string) (*rpc.Conn, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.byID[sessionID]
	if !ok {
		return nil, false
	}
	return a.conn, true
}

// each calls fn for every attached session, on a copy of the table taken
// under one lock (fn may close connections, which detach).
func (s *Sessions) each(fn func(id string, a *attached)) {
	s.mu.RLock()
	ids := make([]string, 0, len(s.byID))
	as := make([]*attached, 0, len(s.byID))
	for id, a := range s.byID {
		ids = append(ids, id)
		as = append(as, a)
	}
	s.mu.RUnlock()
	for i, id := range ids {
		fn(id, as[i])
	}
}

// put attaches a session to a connection and returns the connection it
// replaces (a resume of a session still attached here), if any.
func (s *Sessions) put(id string, c *rpc.Conn, st *connState) *rpc.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.byID[id]
	s.byID[id] = &attached{conn: c, state: st}
	if old != nil && old.conn != c {
		return old.conn
	}
	return nil
}

// remove detaches a session, but only from the given connection (a newer
// connection may have taken the session over). It reports whether it did.
func (s *Sessions) remove(id string, c *rpc.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.byID[id]; ok && a.conn == c {
		delete(s.byID, id)
		return true
	}
	return false
}

// beginOpen marks an open or resume of the session in progress on this
// node; the caller calls the returned func once the connection holds the
// session (put) or the attempt failed.
func (s *Sessions) beginOpen(id string) (end func()) {
	s.mu.Lock()
	s.opening[id]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.opening[id]--; s.opening[id] <= 0 {
			delete(s.opening, id)
		}
	}
}

// held reports whether a local connection holds the session or is opening
// or resuming it.
func (s *Sessions) held(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.byID[id]
	return ok || s.opening[id] > 0
}

func (s *Sessions) get(id string) (*attached, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.byID[id]
	return a, ok
}

// LocalAgentSession returns the session through which agentID is reachable
// on this node: the agent is owned, homed here, and its session is
// attached to a live connection of this node.
func (s *Service) LocalAgentSession(agentID string) (string, bool) {
	a, ok := s.reg.Agent(agentID)
	if !ok || a.OwnerID == "" || a.HomeNode != s.cfg.NodeID {
		return "", false
	}
	if _, ok := s.sessions.Conn(a.SessionID); !ok {
		return "", false
	}
	return a.SessionID, true
}
