// Package federation will hold the links between Concord systems
// (datacenters): peering over gRPC, the exported directory each side syncs,
// cross-system routing with hop counts and loop detection (MAP errors 5010
// and 5011), buffering while a peer is unreachable, and trust.
//
// It is not built yet: until it is, node/router answers a federated address
// ({system, agent}) with FEDERATION_SYSTEM_NOT_FOUND (5001) and
// details.reason "federation_not_supported". The package depends only on
// proto/ and declares the small interfaces it needs from a node
// (ARCHITECTURE.md, "Federation").
package federation
