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
// gateway*.go serve MAP gateways of foreign systems (the SDK's
// GatewayConnection, map-protocol.md §8): gateway_envelope.go decodes the
// three envelope forms of map/federation/route, gateway.go checks
// allowlists, hops and loops and delivers, gateway_state.go is the
// replicated binding of a foreign system to the gateway session that
// routes for it (command 62), which replies to that system follow.
//
// Choices where federation.md leaves room: a message whose link breaks
// after it was sent but before the peer acknowledged answers 5000 (its
// outcome is unknown: it may have been delivered) and is never resent, so
// nothing is delivered twice; messages still buffered drain in order. An
// unknown remote scope answers 5003 like an unexported one. Unlink removes
// this side and tells the peer, which removes its side (best effort: an
// unreachable peer keeps its side until unlinked there).
package federation
