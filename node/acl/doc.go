// Package acl authenticates MAP participants (map-protocol.md §3.6).
//
// It holds three things:
//   - the replicated state module "acl" (raft command types 64..79): API
//     keys, stored only as SHA-256 hashes of their secrets, each bound to a
//     participant id pattern, the participant types and the capabilities
//     it allows;
//   - a bearer-token verifier: JWTs signed RS256, ES256 or EdDSA, checked
//     against a JWKS file for signature, issuer, audience and expiry, with
//     claims mapped to participant id, types and capabilities;
//   - the Authenticator node/mapsvc calls in map/connect and
//     map/auth/refresh, which also applies the anonymous ("none") policy;
//   - the AclAdmin gRPC service (every method an operator-only admin
//     method) behind `concord acl token create|list|revoke`.
//
// Secrets never reach logs or Raft: a key is "map_sk_<id>_<secret>", the
// id is public (list, revoke), the secret is 256 random bits.
package acl
