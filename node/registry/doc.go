// Package registry is the replicated state module "registry": agents,
// scopes, participant sessions with their subscriptions, and the retained
// window of the replicated event log. *State implements raftstore.Module
// (commands arrive through Raft) and Reader (the read API used by
// node/mapsvc, node/router and node/fanout). contract.go holds the shared
// types and is fixed.
//
// It does not decode MAP JSON from participants, check permissions or
// talk to connections: node/mapsvc validates params, authorises, and then
// proposes one of the commands in proto/concord/v1/registry.proto.
//
// # Design notes
//
// Determinism. Every command carries a CommandMeta: the proposer's
// timestamp (ms) and the ULIDs of the events it expects to produce. Apply
// uses the supplied ids in order; if a command produces more events than
// ids were supplied (state changed between proposal and apply, e.g. a
// detach that finds one more agent), the rest are derived from the last
// supplied id by incrementing its 80-bit entropy, or from the command time
// and Raft index when none was supplied. Derived ids and any supplied id
// already in the window are skipped over, so ids are unique in the window
// and identical on every replica. Maps are iterated in sorted key order.
//
// Domain errors. Every command type has a check function (validate.go)
// that runs before its apply function, so a refused command (an *Error
// with its MAP code) leaves no trace, emits no event and consumes no
// position. State.Check runs the same check against the local replica
// without applying, so the MAP layer can refuse a request before writing
// anything to the log. The MAP layer forwards Error.Code as the JSON-RPC
// error code.
//
// Copy-on-write. Entries in the maps are never modified in place: a change
// stores a modified copy. Snapshot therefore only copies the maps' values
// under the read lock; Persist encodes later while Apply continues.
//
// Events. Apply appends the events of a successful command to the window
// with dense positions (last+1, last+2, ...) and closes the Notify channel
// (it never blocks). The window keeps the newest Config.EventWindow events;
// pruning depends only on the count, so replicas with the same config hold
// identical windows. The window is part of the snapshot, so a node restored
// from a snapshot can still serve replays from it.
// Sibling state modules (consensus runs) add their own events to the same
// window from their Apply through AppendEvents, so subscribers see one log.
//
// Apply cost. Every replica, non-voters included, applies every entry, so
// on a shared machine what a non-voter costs per write is mostly its
// apply. The window is a ring overwritten in place once full (eventlog.go;
// the slice it replaced cloned 1.6 MB of pointers every 5,000 events); the
// common event payloads are appended by hand, byte for byte what
// json.Marshal wrote for the maps they replaced (payloads.go); command
// bodies are made by new(T), not protobuf reflection; event ids are
// parsed only when one must be derived. AGENT_UPDATE, the command most
// often applied, and the session, register and cursor commands have hand
// decoders that give any body they do not fully understand to
// proto.Unmarshal (decode.go, decode_table.go); AGENT_UPDATE returns its
// Agent as a raftstore.LazyResult, copied only on the node that reads
// it; the Notify channel is closed only when someone took it. None of it changes
// a byte of replicated state: TestReplay_MatchesGolden holds snapshots
// after random and escape-heavy logs to digests written by fa0db43.
// BenchmarkApply_* measures it; the figures are in raftstore/DESIGN.md
// ("Applying an entry on every replica", "Ninth round: apply").
//
// Sessions. A session has an epoch that increases at every attach (open,
// resume) and detach (connection lost, map/disconnect). The node holding
// the connection quotes the epoch it attached at in SESSION_DETACH and
// SESSION_CLOSE; a detach for an older epoch (the session has since been
// resumed elsewhere) is a no-op. Detach applies the disconnect policy:
// unregister (the default for an empty policy) removes the session's
// agents; orphan clears their owner and sets state "orphaned"; grace-period
// orphans now and unregisters the still-orphaned agents at
// detachedAt+gracePeriodMs. A detach also fixes the session's TTL, after
// which it is forgotten. Both deadlines derive from the detach command's
// timestamp; the leader proposes SESSION_EXPIRE (see Expiries) and Apply
// re-checks epoch, detachment and deadline against the expiry command's
// own timestamp, so a duplicate from a new leader is a no-op. A resume
// (SESSION_OPEN with resume) re-homes the session and its agents to the
// proposing node and gives orphaned agents back their previous state. A
// resume that quotes resume_from_epoch applies only while the session is
// still at that epoch (ErrSessionMoved otherwise, state unchanged): a
// resume the client was told failed may still reach the log later (its
// forward was on the wire) and must not take the session from the resume
// that succeeded elsewhere meanwhile. Likewise reclaim_agents with
// reclaim_from_sessions takes only the agents still in the session the
// proposer saw them in, and a register quoting session_epoch applies only
// while its session is at that epoch. So does every other write a
// connection makes for its session (agent update and unregister, scope
// writes, subscription add and remove: origin_session_epoch or
// session_epoch; checkOrigin), and a cursor quoting session_epoch is
// skipped once the session was attached again since. The state modules
// beside the registry refuse their own connection writes the same way
// (permissions updates, gateway binds, run task replies), reading the
// session here at apply (State.CheckOrigin, State.SessionEpoch). Proposers
// quote these only once every server enforces them (levels.go).
// notifySubscribers of the SDK policy is stored but events are always
// emitted (subscribers filter by type).
//
// Scopes. Deleting a scope with child scopes is refused (-32600) rather
// than leaving children with a dangling parent. An autoDelete scope is
// deleted when its last member leaves (or is unregistered).
//
// Consistency of reads: Reader methods read the local replica (possibly
// behind the leader); callers that need linearizable reads ask the store
// for a read barrier first.
package registry
