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
// Layout: state*.go is the replicated state (applied by node's raftstore
// adapter), token.go the peering token codec, envelope.go the routing
// checks, policy.go export/import filters, buffer.go the outage buffer,
// link*.go the streams, service.go the gRPC service, manager.go ties them.
package federation
