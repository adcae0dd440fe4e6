// Package mapsvc is the MAP method table of a Concord node: an rpc.Handler
// that serves map/connect, map/disconnect, map/auth/refresh,
// map/agents/{register,unregister,get,list,update,spawn,stop,suspend,resume},
// map/structure/graph and map/scopes/{list,get,create,delete,join,leave,members},
// map/federation/{connect,route} for gateway participants (through
// Config.Gateway, the federation manager),
// and delegates map/send to node/router and map/subscribe,
// map/unsubscribe, map/replay, map/subscribe.ack and map/ack to
// node/fanout (each through a small interface declared here). It owns the
// table of sessions attached to this node's connections (Sessions, the
// LocalSessions of router and fanout). node.Server builds it with New and
// runs Service.Run.
//
// Other packages extend the table without mapsvc knowing them:
// Config.ExtensionMethods mounts extra methods (x-concord/runs/*). A
// map/send addressed to a service id (such as "concord.runs") is the
// router's business like any other address (router.RegisterService):
// mapsvc never reads a send's params.
//
// Writes are Raft commands of the registry module (node/registry), built
// here with the node's clock and fresh ULIDs, proposed through
// Config.Store. Params are validated before anything is proposed, so a
// refused request writes nothing: -32602 names the offending field,
// registry domain errors come back with their MAP code (2001, 2002, 3000,
// 3001, ...), a cluster without a leader gives a retryable 4000.
//
// # Connection lifecycle
//
// Every method but map/connect needs a session first; before it the answer
// is 1000 AUTH_REQUIRED ("call map/connect first"): the connection has not
// authenticated, and 1000 is the code MAP clients already handle by
// (re)connecting. Credentials are checked by Config.Authenticator (see
// "Authentication and permissions" below); map/auth/refresh renews the
// credential of a session (1005 for an anonymous one). credentials.go
// follows each open session's credential: map/auth/expiring before it
// expires, map/auth/revoked when it expired or its API key was revoked
// (on every node: the revoke is a Raft command), then every call but
// refresh/disconnect answers 1002/1001 and the connection is closed after
// Config.AuthRevokeGrace.
//
// map/connect creates a session (SESSION_OPEN) owned by this node and
// returns a resumeToken "<sessionId>.<secret>" (the registry keeps only
// its SHA-256). A connect with sessionId and/or resumeToken of a known
// session resumes it: the session, its agents and its orphans are re-homed
// here, subscriptions are restored through Fanout.Attach, and the result
// says reconnected:true. The token alone is enough (the SDK's
// AgentConnection sends no sessionId). An unknown session starts afresh;
// a known one with a wrong or missing token is 1001.
//
// Agents registered on a connection are owned by its session (ownerId =
// participantId, home node = this node). When the connection closes,
// Closed proposes SESSION_DETACH with the connection's attach epoch, and
// the registry applies the session's disconnectPolicy (default from
// Config.DefaultDisconnectPolicy). map/disconnect proposes SESSION_CLOSE,
// which does the same and leaves the session resumable. Run, on the
// leader, proposes SESSION_EXPIRE when a grace period or
// DetachedSessionTTL ends (times from the log, see node/registry). A
// session detached while its connection here is still open (the leader
// wrongly saw this node fail) gets that connection closed with the
// reconnect code, so the client resumes rather than wait on a connection
// that routing no longer serves. The reverse, a session the registry
// shows connected here with no connection behind it (a restored snapshot,
// a crash and restart), is detached by this node after
// Config.OrphanGrace (orphans.go).
//
// # Permissions
//
// Callers are checked against each method's callableBy list (system may
// call everything) and its capability (§3.3), both failing with 1003.
// Granted capabilities are the participant type's defaults
// (capabilities.go) narrowed by flags the participant set to false.
// Changing an agent (update, unregister, scope join/leave) also needs the
// caller to own it or one of its ancestors; changing its permissionOverrides
// needs a system participant or an ancestor's owner. A participant's
// capability ceiling (map/permissions/update, Config.ParticipantPermissions)
// narrows its granted capabilities at every call; the same call sets its
// client permissions (§7 layer 2, clientlimits.go): withdrawn actions
// (1003 naming the action), limits (4002 for counts, 4001 for
// messagesPerMinute) and client visibility. Visibility (§7) is in
// visibility.go, over node/access.
//
// # Read consistency
//
// Reads are served from the local replica (possibly behind the leader by
// the replication lag): map/agents/get, map/agents/list,
// map/structure/graph, map/scopes/list, map/scopes/get,
// map/scopes/members. A read whose params carry
// "_meta": {"consistency": "linearizable"} first calls
// Config.LinearizableRead (4000 when unavailable). Writes answer after
// their command is committed and applied on the leader; through a
// follower, with the leader's result (registry commands) before this
// node applied it. The Service keeps a fence, the index of the writes it
// answered, and every later request first waits, with
// Config.WaitApplied, until this node applied it (fence.go), so a
// participant reads its own writes on the node it is connected to. A
// request skips only writes that cannot change what it reads: neutral
// agent updates, and for map/connect that reads no session or agent,
// fresh sessions too (a burst of connects does not wait for each other).
// map/connect's resume check reads
// the local replica; the registry re-checks in Apply.
//
// Authentication and permissions. map/connect hands its auth to
// Config.Authenticator (node/acl) and binds the session to the Principal:
// the participant type must be allowed, the participant id must match the
// credential's pattern, an anonymous participant cannot take an id in use,
// and the capabilities are narrowed to the credential's. New anonymous
// sessions are rate-limited per client address on each node (4001,
// Config.AnonymousSessionRate, anonlimit.go). Agent changes need
// the owner, an ancestor's owner or a system participant; scope deletion
// and invitations the scope's owner; joins follow joinPolicy. Reads hide
// what map-protocol.md §7 hides (node/access), answering 2001/2002 for a
// hidden agent or scope.
package mapsvc
