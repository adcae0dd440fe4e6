package registry

// FSM levels. A command field whose apply changes what an older FSM would
// do with the same entry (it ignores fields it does not know) must not
// reach the log while a server that ignores it may apply it: the replicas
// would diverge. Each such behaviour gets a level; a node advertises the
// level its build enforces in gossip (membership.NodeMeta.FSMLevel), and a
// proposer sets the field only once every server of the Raft configuration
// advertises at least that level (node: Server.fsmLevel). Levels only
// grow; a build enforces every level up to FSMLevel.
//
// From FSMLevelSystemRecord on, the level the whole system reached is also
// recorded in replicated state (COMMAND_TYPE_SYSTEM_FSM_LEVEL, apply_level.go):
// the leader proposes it once every server advertises it, level-gated
// fields of higher levels wait for the record, and a build whose level is
// below the recorded one (a downgrade in place) halts its FSM instead of
// applying the log differently. Code compares against these names, never
// against numbers: a level added on another branch takes the next number
// and the record's level moves up with it.
const (
	// FSMLevelResumeEpoch: SESSION_OPEN's resume_from_epoch is enforced
	// (checkSessionOpen refuses a resume for an epoch the session left),
	// and so is reclaim_from_sessions (an agent that moved to another
	// session since the proposer read it is not reclaimed), and
	// AGENT_REGISTER's session_epoch (a register from a connection whose
	// session moved on is refused).
	FSMLevelResumeEpoch = 1

	// FSMLevelSessionWrites: the other writes a MAP connection makes for
	// its session quote the attach epoch it holds, and apply refuses them
	// once the session left it (ErrSessionMoved; checkOrigin): AGENT_UPDATE,
	// AGENT_UNREGISTER and SCOPE_CREATE / _DELETE / _JOIN / _LEAVE
	// (origin_session_id, origin_session_epoch), SUBSCRIPTION_ADD and
	// _REMOVE (session_epoch). A SUBSCRIPTION_CURSOR entry's session_epoch
	// skips that cursor once the session was attached again since.
	FSMLevelSessionWrites = 2

	// FSMLevelSystemRecord: COMMAND_TYPE_SYSTEM_FSM_LEVEL is understood
	// (an older build panics on the unknown type, so it is proposed only
	// once every server advertises this level), and a level above the
	// build's halts the FSM.
	FSMLevelSystemRecord = FSMLevelSessionWrites + 1

	// FSMLevelModuleSessionWrites: the session writes whose state lives
	// in the modules beside the registry quote the connection's attach
	// epoch too, and their apply, reading the session here
	// (State.CheckOrigin, State.SessionEpoch), refuses them once the
	// session left it (ErrSessionMoved; federation's own for a bind):
	// ACL_PERMISSIONS_UPDATE (node/acl, origin_session_id,
	// origin_session_epoch), FED_GATEWAY_BIND (federation, session_epoch;
	// FED_GATEWAY_UNBIND's session_epoch keeps a binding whose session
	// was attached again since) and a RUN_INPUT carrying an agent's
	// map/send reply (node/runs, origin_session_id, origin_session_epoch).
	FSMLevelModuleSessionWrites = FSMLevelSystemRecord + 1

	// FSMLevelDrainAdmissions: COMMAND_TYPE_DRAIN_ADMIT and _RELEASE are
	// understood (apply_drain.go): the leader records the drains it admits
	// in replicated state, so a new leader counts them against
	// --min-quorum. Below it the leader keeps them in its memory only.
	FSMLevelDrainAdmissions = FSMLevelModuleSessionWrites + 1

	// FSMLevel is the newest level this build enforces.
	FSMLevel = FSMLevelDrainAdmissions
)

// GateLevel is the level a proposer may rely on, given the lowest level
// every server advertises (gossip) and the level recorded in replicated
// state: a level below FSMLevelSystemRecord needs only the advertisement
// (levels older than the record are never recorded before it exists);
// from FSMLevelSystemRecord on it also needs the record, so no field of
// that level reaches the log before the record that makes a lower build
// halt on it.
func GateLevel(advertised, recorded int) int {
	return min(advertised, max(recorded, FSMLevelSystemRecord-1))
}
