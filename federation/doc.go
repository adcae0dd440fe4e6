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
// adapts them to a raftstore module), token.go the peering token codec,
// envelope.go the hop/loop checks and the delivered Message, policy.go the
// export/import filters, buffer.go the outage buffer, link.go this node's
// outbound stream to one system, inbound.go the streams peers open here,
// peering.go tokens and the handshake, service.go the gRPC service,
// trust.go the TLS identity checks, manager.go ties them together.
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
// Choices where federation.md leaves room: a message whose link breaks
// after it was sent but before the peer acknowledged answers 5000 (its
// outcome is unknown: it may have been delivered) and is never resent, so
// nothing is delivered twice; messages still buffered drain in order. An
// unknown remote scope answers 5003 like an unexported one. Unlink removes
// this side and tells the peer, which removes its side (best effort: an
// unreachable peer keeps its side until unlinked there).
package federation
