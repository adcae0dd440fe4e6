// Package node is the composition root of one Concord process: it wires the
// Raft store (package raftstore) with the replicated registry (node/registry),
// the MAP service (node/mapsvc, node/router, node/fanout) on the JSON-RPC
// transports (node/rpc), and serves HTTP: the MAP WebSocket endpoint at /map,
// /v1/health, /v1/ready, Prometheus /metrics and, with EnableDebug,
// /debug/pprof.
//
// A Server is built from a Config (DefaultConfig for production values,
// DevConfig for a single throwaway node on 127.0.0.1), started with Start and
// stopped with Shutdown, which tears everything down in reverse start order.
// cmd/concord maps its flags onto Config; tests start Servers in-process.
//
// Security (security.go): with Config.TLS every port runs TLS; gRPC and
// Raft require a member's server certificate (node/tlsconf verifies,
// node/authz authorizes each method and HTTP endpoint), and the leader
// probes a server's identity before adding it as a voter. Without TLS a
// node runs only with Config.Insecure (--insecure, --dev), logged loudly.
//
// Code that runs on the other side of a MAP connection lives under
// node/client/: mapclient (a Go MAP client), stdio (the `concord stdio`
// bridge from a subprocess's NDJSON to a node's WebSocket), agentbridge
// (`concord agent`), argueclient (`concord argue`) and admin (typed clients
// of the operator gRPC services for `concord members|raft|keyring|federation|acl`,
// so cmd never imports proto). They may import the server-side packages'
// wire types; no server-side package imports them.
package node
