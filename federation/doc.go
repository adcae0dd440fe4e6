// Package federation links Concord systems (datacenters): peering tokens
// and the handshake, the replicated link and imported-directory state, the
// per-node Link streams to each peer system, cross-system envelopes with
// hop counts and loop detection (MAP errors 5010 and 5011), the outage
// buffer, export policies and trust (federation.md).
//
// It depends only on proto/ and the standard library plus gRPC; what it
// needs from a node (proposing to Raft, delivering to local agents, the
// local directory to export) is declared here as small interfaces and
// passed in by package node.
//
// Layout: state.go and state_snapshot.go are the replicated state (node
// adapts them to a raftstore module), state_outbox.go its guaranteed
// outbox and inbox, pending unlinks and staged directory chunks,
// guaranteed.go guaranteed delivery, guaranteed_order.go its in-order
// delivery on the receiving side, relay.go its drain through another
// node while the leader's stream is down, directory.go the export digest and
// chunker, unlink.go the unlink retried until the peer confirms,
// token.go the peering token codec,
// envelope.go the hop/loop checks and the delivered Message, policy.go the
// export/import filters, buffer.go the outage buffer, link.go this node's
// outbound stream to one system (link_send.go: a message that finds it
// idle is written by its sender's goroutine; direct.go: a best-effort
// message for a remote agent rides a stream to the peer server holding
// that agent, skipping the relay inside the peer), inbound.go the
// streams peers open here,
// peering.go tokens and the handshake, service.go the gRPC service,
// trust.go the TLS identity checks, manager.go ties them together.
// gateway*.go serve MAP gateways of foreign systems (the SDK's
// GatewayConnection, map-protocol.md §8): gateway_envelope.go decodes the
// three envelope forms of map/federation/route, gateway.go checks
// allowlists, hops and loops and delivers, gateway_state.go is the
// replicated binding of a foreign system to the gateway session that
// routes for it (command 62), which replies to that system follow. A bind
// quotes the attach epoch of the routing connection and the leader's
// unbind the epoch its session ended at; apply checks them against the
// node's session registry (State.WithSessions), so a late bind from a
// connection whose session moved on, or an unbind of a session resumed
// since, changes nothing.
//
// Links of kind map (federation.md §6, outbound) reach a foreign MAP
// server by its WebSocket URL instead of another Concord system:
// state_map.go is their replicated part (FED_MAP_LINK_PUT, the leader's
// choice of holder node FED_MAP_HOLDER with an epoch that fences stale
// holders, the foreign directory FED_MAP_DIRECTORY), mapadmin.go creates
// them and chooses holders (rendezvous hash over live nodes, kept while
// alive), maplink.go runs one on every node (the holder role, or
// forwarding to the holder over MapForward), maphold.go the holder's
// sessions, mapproxy.go one proxy agent per local agent on the foreign
// server (a MAP server stamps each message with its session's agent, so
// every local sender needs its own session there), mapwatch.go the
// directory watcher, mapwire.go the MAP shapes read and sent. The MAP
// connection itself comes from node (MAPDialer, on node/rpc).
//
// Choices for map links: exported agents get a proxy at once; any other
// local sender gets one on its first message (it reveals itself by
// sending, as over a Concord link) but, like over a Concord link, only
// exported agents receive from the foreign system. Proxies connect with
// disconnectPolicy "unregister" so that the next holder can register the
// same id; a server that ignores it keeps the dead holder's proxies,
// which the next holder's watcher unregisters (they carry the holder's
// node and epoch in metadata). A request that expects a response opens a
// pairing: an answer without a correlation id (servers that drop meta) or
// with the foreign message id gets the request's correlation id back.
//
// Choices where federation.md leaves room:
//
// Best effort (the default): a message whose link breaks after it was
// sent but before the peer acknowledged answers 5000 (its outcome is
// unknown: it may have been delivered) and is never resent, so nothing is
// delivered twice; messages still buffered drain in order. An unknown
// remote scope answers 5003 like an unexported one. A best-effort
// message for one remote agent whose home server the peer exported
// (FedRemoteAgent.home_addr) takes a direct stream to that server when
// one is up (direct.go; Config.DirectStreams): order per target holds
// because a target changes streams only when the one its last messages
// took holds nothing unanswered. Guaranteed messages never take direct
// streams (they keep the outbox and its strict seq order); a guaranteed
// and a best-effort message to the same agent were never ordered with
// each other (the first goes through the Raft outbox and the leader).
//
// Guaranteed (meta.delivery "guaranteed", or a link with
// FedOutboxPolicy.guaranteed): the message is appended to the link's
// outbox in this system's Raft log (FED_OUTBOX_PUT, numbered per link)
// before the sender hears anything; the sender then hears the peer's
// answer if it comes within Config.GuaranteedWait while this node's
// stream is up, else "queued". Only the leader drains outboxes, over its
// own stream, in seq order with up to 256 in flight, and only once a
// quorum confirms it still leads (so a deposed leader does not send
// alongside its successor); a new leader sends again everything not yet
// removed. While the leader's own stream to the peer is down it relays
// the outbox (Config.RelayGuaranteed, on by default; relay.go,
// OutboxRelay) through another node whose stream is up, chosen by
// rendezvous hash of the peer (the next when one refuses): one call at a
// time, a prefix of the outbox in seq order, put on that node's stream
// ahead of its buffer, the peer's acks returned verbatim. The leader
// stays the only sender: its own stream does not drain while a relay
// call is out, after a failed call no path sends for AckTimeout, and
// after its own stream broke with guaranteed messages in flight it
// relays only once AckTimeout passed (the peer's in-progress dedupe is
// per receiving server, so one seq should not be on its way through
// two; a reconnect of the own stream resends at once). With the relay
// off, or no stream up anywhere, the outbox waits while the leader's own
// stream is down (its messages answer "queued"). A message leaves the
// outbox (FED_OUTBOX_ACK) once the peer answered it, delivered or
// refused for good; a 5000 from the peer is sent again after a pause.
// Either path sends only the outbox up to its first held message (one
// pausing after a 5000 or a failed relay call), passing over those in
// flight: the peer would refuse everything after it until it came again.
// The peer refuses for good what the agent cannot take (unknown agent,
// not exported, its connection gone or too slow: 2001/5003/2003) and
// answers 5000 when it could not reach the agent's node inside its own
// system, so that transient failure does not drop the message.
// Guaranteed messages need a direct link (5001 on a transitive route);
// the outbox is bounded per link (10,000 messages / 16 MiB unless the
// link says otherwise) and a full outbox answers 5000. A new link to a
// peer starts numbering afresh on both sides.
//
// The receiving side delivers guaranteed messages from one source
// strictly in seq order (guaranteed_order.go): each stream hands them
// to a sequencer that delivers one at a time and waits for its outcome,
// and a seq is delivered only once every earlier seq down to the
// sender's floor (its oldest unanswered seq, carried in the envelope) is
// recorded in the inbox or final on this node; otherwise it answers 5000
// and the sender sends it again behind the earlier one. The sender's
// order alone does not suffice: up to 256 are in flight, so n+1 is on its
// way before n is refused (and before the sender's prefix drain, a relay
// call answered n with 5000 and the own stream, back after a heal, sent
// n+1... ahead of it: the partition-and-heal tests delivered the first
// queued message last, [1 2 0], about one run in four). The cost: one stream hands guaranteed messages to agents one
// at a time (an agent on another node of the receiving system costs a
// relay round trip each); best-effort messages are not held behind them.
//
// After the agent's connection took a message (or it was refused for
// good), the receiving node records its seq in its system's Raft inbox
// (FED_INBOX_MARK: a floor below which all is done plus the seqs above
// it, bounded) and only then answers; a seq already recorded answers
// "duplicate" and is not delivered again, and one taken on this node
// but not yet recorded answers 5000. A mark that fails is tried again
// until it commits (answering 5000 would have the sender resend a
// delivered message). Each inbound stream waits for a Raft barrier
// before its first dedupe check, so marks committed through another
// node are seen. A relink numbers from 1 again: every stored link has an
// epoch (the Raft index of its FED_LINK_PUT), a stream's marks and taken
// messages name the epoch of the link it opened on, and a mark for a
// replaced link is dropped rather than entered in the new link's inbox.
// Before delivering, a server holds the seq in the Raft inbox
// (FED_INBOX_MARK take_seqs, one commit per batch waiting on the
// stream, guaranteed_hold.go): a resend through another server while
// the first one's mark is on its way (a new leader's stream after a
// kill, a relay) answers 5000 instead of being delivered again. A hold
// lapses after AckTimeout; a stream's unused holds are released when
// it ends.
// A stream opened on a link since replaced delivers no more guaranteed
// messages (their marks would be dropped and their acks would leave
// nothing to dedupe a resend by): it answers 5000 and ends, and the
// sender resends on a stream of the new link.
//
// What guaranteed delivery promises: at-least-once delivery to the
// agent's connection, each delivery carrying the sender's MAP message id
// (the same every time, to de-duplicate by), exactly-once recording in
// the receiving system's inbox, and first deliveries in seq order per
// source system and link. A duplicate reaches the agent only when the
// agent's connection took the message and then, before its inbox mark
// committed, the receiving node died (or its mark stayed uncommitted
// past its hold, AckTimeout, as when it lost its system's quorum) and
// the sender's resend reached another server of the receiving system;
// it may come after later messages. Recording the
// mark before handing the message over would turn that window into a
// possible loss, and redelivering from the receiving system's own inbox
// after a node death only moves it (the next deliverer cannot know
// whether the dead node's connection wrote the message): MAP has no
// agent-level ack, so exactly-once to an agent is not offered. An agent
// that must not act twice keeps the ids of what it processed.
//
// Directory: the leader asks a peer for changes every DirectorySync and
// every follower every third tick, so the import goes on when the
// leader's stream is down; any node proposes what it gets back, and the
// state ignores versions it has. A request carries the stored version
// and the exporter's digest of that set, so any stream can answer
// "unchanged" cheaply and deltas on a fresh stream start from the
// importer's set. Updates cross in chunks of at most DirectoryChunkBytes
// (256 KiB, at most 512 KiB), one Raft entry each (FED_DIRECTORY_CHUNK),
// staged in the state until the last.
//
// Unlink removes this side and, in the same Raft entry, keeps a pending
// unlink; the peer is told at once and, when unreachable, by the leader
// every UnlinkRetry until it confirms (a peer without the link counts as
// confirmed). `unlink --force` drops the record. A new link to the same
// peer cancels a pending unlink of the old one.
//
// Services: an envelope for an in-process service id of the target system
// ("<system>:agent:concord.runs": agents' answers to the tasks of a debate
// homed there) is handed to that service (ServiceDeliverer) and
// acknowledged with its answer; no export policy applies to services,
// which authorize the remote sender themselves.
package federation
