// Package tlsconf loads a node's or the CLI's TLS material (the system CA,
// a certificate and its key) and builds the tls.Configs of every port: the
// gRPC and Raft ports (mutual TLS between nodes), the HTTP/WebSocket port
// (optional client certificates) and the client side of the CLI.
//
// Peer certificates are verified here, not by crypto/tls, against the CA
// currently loaded, so that Reload (what SIGHUP calls) swaps the CA, the
// certificate and the key atomically without restarting listeners:
// established connections keep working and new handshakes see the new
// material. A refused certificate (expired, signed by another CA, of
// another system or role) fails the handshake with an error that says
// which, and is logged. The verified identity (package pki) is what
// package authz authorizes.
//
// StreamLayer wraps a raft.StreamLayer in TLS for the Raft transport.
package tlsconf
