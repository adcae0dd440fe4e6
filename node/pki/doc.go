// Package pki creates the certificates of a Concord system and reads the
// identity they carry: one CA per system, server certificates for nodes and
// client certificates for operators and the CLI (the conventions of
// TRUST.md, summarised in README "Security").
//
// An identity is a URI SAN, concord://SYSTEM/ROLE/NAME: role "server" names
// a node id, role "operator" an operator. Operators who bring their own PKI
// only need certificates whose URI SAN follows that form. Package tlsconf
// builds TLS configurations on top of this; cmd/concord's `tls` commands
// call CreateCA, IssueServer and IssueClient. The package does no network
// I/O; its file helpers write PEM files with 0600 keys.
package pki
