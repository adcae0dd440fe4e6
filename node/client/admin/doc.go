// Package admin is the client side of a node's operator gRPC services
// (Cluster, Admin, Federation, AclAdmin): typed Go methods returning plain
// structs, so `concord` subcommands only format output and never touch the
// generated stubs (STYLE.md §1: cmd depends on node only).
//
// A Client wraps a connection the caller dialled and owns; the caller also
// sets the deadline, credentials and admin marker on the context.
package admin
