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
// guaranteed.go guaranteed delivery, directory.go the export digest and
// chunker, unlink.go the unlink retried until the peer confirms,
// token.go the peering token codec,
// envelope.go the hop/loop checks and the delivered Message, policy.go the
// export/import filters, buffer.go the outage buffer, link.go this node's
// outbound stream to one system (link_send.go: a message that finds it
// idle is written by its sender's goroutine), inbound.go the streams
// peers open here,
// peering.go tokens and the handshake, service.go the gRPC service,
// trust.go the TLS identity checks, manager.go ties them together.
// gateway*.go serve MAP gateways of foreign systems (the SDK's
// GatewayConnection, map-protocol.md §8): gateway_envelope.go decodes the
// three envelope forms of map/federation/route, gateway.go checks
// allowlists, hops and loops and delivers, gateway_state.go is the
// replicated binding of a foreign system to the gateway session that
// routes for it (command 62), which replies to that system follow.
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
// remote scope answers 5003 like an unexported one.
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
// removed. While the leader's own stream to the peer is down the outbox
// waits (its messages answer "queued"). A message leaves the outbox
// (FED_OUTBOX_ACK) once the peer answered it, delivered or refused for
// good; a 5000 from the peer is retried. The peer delivers, records the
// seq in its own Raft inbox (FED_INBOX_MARK: a floor below which all is
// done, from the sender's oldest unanswered seq, plus the seqs above it,
// bounded), and only then answers; a seq already recorded answers
// "duplicate" and is not delivered again. Each inbound stream waits for
// a Raft barrier before its first dedupe check, so marks committed
// through another node are seen. The one window left is the receiving
// node dying between the agent's connection taking a message and the
// mark's commit: the message is then delivered again (with the same MAP
// message id). Order is kept: once the peer refused a seq retryably
// (5000), the receiving stream refuses later seqs until that one comes
// again, and the drainer resends in seq order. Guaranteed messages need a direct link (5001 on a
// transitive route); the outbox is bounded per link (10,000 messages /
// 16 MiB unless the link says otherwise) and a full outbox answers 5000.
// A new link to a peer starts numbering afresh on both sides.
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
