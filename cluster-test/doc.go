// Package clustertest starts real Concord clusters and breaks them.
//
// Two harnesses live here:
//
//   - New(t, n, opts...) starts n node.Servers in one process: real Raft over
//     loopback TCP, real gossip, real gRPC between nodes, every listener on
//     127.0.0.1 with the port read back (or reserved just before start where
//     a port must be known before the node binds it: gossip seeds, gRPC),
//     a t.TempDir() per node, FastConfig() timings, and logs to t.Output()
//     with a "node" attribute. Raft's stream layer and the gRPC dialer of
//     every node go through one faultnet.Network (Cluster.Net), so a test can
//     partition, isolate, delay and drop connections between nodes.
//     Verbs: Leader, Followers, Node, Stop/Restart (data kept), Kill (hard
//     stop: isolated and torn down without a goodbye), Remove, Leave,
//     AddNode, WaitApplied, RequireConverged, RequireInvariants.
//     Several systems: WithSystem("dc1") names a cluster's system (node ids
//     become "dc1-n1", ...) and WithSharedNetwork(NewNetwork(t, nil)) puts
//     clusters on one fault network, so a test partitions systems from each
//     other; Link(t, from, to, LinkSpec{...}) peers two of them with a
//     token as an operator does, and LinkUp waits for every node's stream.
//   - StartProcs(t, n) builds the real concord binary once per test binary
//     and runs n `concord server` processes (process groups, killed at
//     cleanup even when the test fails), for kill -9 scenarios.
//   - StartWAN(t, n, shape, "dc1", "dc2") runs one such system per id,
//     each in its own network namespace, every pair joined by an emulated
//     WAN link (package wannet: delay, jitter, loss; Cut/Restore,
//     Down/Up); WAN.Peer links two systems with the CLI, StreamTo names
//     the server a process's link stream is connected to. The test reaches
//     the processes through forwarders into the namespaces. It skips,
//     naming the reason, where namespaces cannot be made (RequireWAN).
//
// Both run with TLS on every port, as production does: certificates come
// from a throwaway CA per test binary (node/tlsconf/tlstest); MAP clients
// dial wss:// trusting it (ClientTLS), admin calls present the test
// operator's certificate (OperatorTLS, OperatorEnv for the CLI).
//
// Every scenario ends with RequireInvariants: the replicas converge to the
// same registry digest, every acknowledged register/unregister is reflected
// exactly once in the replicated event log and in the state, and no two
// nodes were ever seen leading in the same term.
//
// All waiting bounds live in timeouts.go and scale with
// CONCORD_TEST_TIMEOUT_SCALE. Long loops build only with the chaos tag
// (make chaos). The MAP client helper (Client) speaks JSON-RPC over
// node/rpc.Dial without reconnect logic, so the test sees every failure.
//
// Nothing in the repository imports this package.
package clustertest
