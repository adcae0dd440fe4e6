// Package authz decides who may call what on a node's gRPC and HTTP ports,
// from the identity a verified TLS certificate carries (package pki) or an
// operator token.
//
// Every gRPC method has a Class (Methods): node-to-node methods (Forward,
// Relay) need a server certificate of the system whose node id is a
// current member; read-only cluster views (Members, RaftPeers, Status)
// take a member server or an operator; admin methods (RemovePeer, and the
// keyring) take an operator certificate, the operator token, or a member
// server passing an operator's request on to the leader (a member can
// already write to the log, so this grants it nothing new). A method not
// listed is refused, so a new service is closed until someone classifies
// it. The HTTP middleware applies the same rules to operator endpoints.
//
// Without TLS (--insecure) no identity exists: node-to-node and read
// methods are open, admin methods still need the token when one is set.
// node wires the interceptors into the gRPC server and the middleware into
// the HTTP mux.
package authz
