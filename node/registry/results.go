package registry

// Results returned by Apply to the proposer (raftstore hands them back from
// Store.Apply unchanged). All are copies; the proposer may keep them.
//
//	AGENT_REGISTER       RegisterResult
//	AGENT_UNREGISTER     Agent (the removed agent)
//	AGENT_UPDATE         Agent (after the update)
//	SESSION_OPEN         SessionResult
//	SESSION_CLOSE        DetachResult
//	SESSION_DETACH       DetachResult
//	SESSION_EXPIRE       DetachResult
//	SUBSCRIPTION_ADD     Subscription
//	SUBSCRIPTION_REMOVE  Subscription (the removed one)
//	SUBSCRIPTION_CURSOR  int (how many cursors moved)
//	SCOPE_CREATE         Scope
//	SCOPE_DELETE         Scope (the removed one)
//	SCOPE_JOIN/LEAVE     MembershipResult

// RegisterResult is the result of COMMAND_TYPE_AGENT_REGISTER.
type RegisterResult struct {
	Agent Agent
	// Resumed is true when resumePersistentIdentity reclaimed an orphaned
	// agent instead of creating one; PreviousSessionID is the session that
	// owned it before.
	Resumed           bool
	PreviousSessionID string
	// Existing is true when the id was already registered and the register
	// was accepted for its owner (see the SDK note on registerExisting):
	// Agent is the existing agent, its fields unchanged.
	Existing bool
}

// SessionResult is the result of COMMAND_TYPE_SESSION_OPEN.
type SessionResult struct {
	Session Session
	// Epoch is the attach epoch of this connection; quote it in the
	// SESSION_DETACH / SESSION_CLOSE of the same connection.
	Epoch   uint64
	Resumed bool
	// Reclaimed are the agents whose ownership moved to the session
	// because of reclaim_agents or the resume; NotReclaimed the requested
	// ids that could not be reclaimed (unknown, or owned by someone else).
	Reclaimed    []Agent
	NotReclaimed []string
	// OwnedAgents are the ids of all agents the session owns afterwards.
	OwnedAgents []string
}

// DetachResult is the result of SESSION_DETACH, SESSION_CLOSE and
// SESSION_EXPIRE.
type DetachResult struct {
	// Applied is false when the command was stale (unknown session, a
	// different epoch, not detached, deadline not reached): nothing changed.
	Applied bool
	// Session is the session after the command (zero once Removed).
	Session      Session
	Unregistered []string
	Orphaned     []string
	// Removed: the TTL expiry forgot the session.
	Removed bool
}

// MembershipResult is the result of SCOPE_JOIN and SCOPE_LEAVE.
type MembershipResult struct {
	Scope Scope
	Agent Agent
	// Changed is false when the agent already was (join) or was not
	// (leave) a member: the command is idempotent and emits nothing.
	Changed bool
	// ScopeDeleted: leave emptied an autoDelete scope, which was deleted.
	ScopeDeleted bool
}

// Expiry is a pending deadline of a detached session, for the leader's
// expiry loop (see State.Expiries).
type Expiry struct {
	SessionID string
	Epoch     uint64
	// Kind is ExpireGrace or ExpireTTL (SessionExpireRequest.kind).
	Kind string
	// Deadline in ms since the epoch, derived from the detach command's
	// timestamp (a time from the log, not a local clock).
	Deadline int64
}

// Expiry kinds.
const (
	ExpireGrace = "grace"
	ExpireTTL   = "ttl"
)
