// Package acl authenticates MAP participants (map-protocol.md §3.6).
//
// It holds:
//   - the replicated state module "acl" (raft command types 64..79): API
//     keys, stored only as SHA-256 hashes of their secrets, each bound to a
//     participant id pattern, the participant types and the capabilities
//     it allows; and the participants' capability ceilings and client
//     permissions (withdrawn actions, limits, visibility) set with
//     map/permissions/update (permissions.go, read by node/mapsvc and the
//     fan-out);
//   - a bearer-token verifier: JWTs signed RS256, ES256 or EdDSA, checked
//     against a JWKS for signature, issuer, audience and expiry, with
//     claims mapped to participant id, types and capabilities. The JWKS
//     comes from a file (re-read on change and on SIGHUP) or an https URL
//     (re-fetched on an interval, on SIGHUP and on an unknown kid, rate
//     limited, with a timeout and a size bound): jwks.go;
//   - the Authenticator node/mapsvc calls in map/connect and
//     map/auth/refresh, which also applies the anonymous ("none") policy,
//     and re-checks open sessions' API keys (CredentialChecker) so that a
//     revoke ends them on every node;
//   - the AclAdmin gRPC service (every method an operator-only admin
//     method) behind `concord acl token create|list|revoke`.
//
// Secrets never reach logs or Raft: a key is "map_sk_<id>_<secret>", the
// id is public (list, revoke), the secret is 256 random bits.
package acl
