// Package benchload is the load generator behind `concord bench`: it drives
// any Concord node (or cluster) over MAP WebSocket, as `nats bench` or etcd's
// `benchmark` do for their servers, and summarises what it measured.
//
// Three loads:
//   - Write: N clients, spread round-robin over the URLs, each registers one
//     agent and then updates it (map/agents/update, one Raft commit each) with
//     one request in flight; writes/s and latency percentiles.
//   - Sessions: N idle sessions (map/connect, nothing else), connect rate,
//     and the nodes' resident memory and goroutines before and after, read
//     from /v1/status.
//   - Send: pairs of agents (the receiver on another URL when several are
//     given); each sender pipelines map/send up to a window of unanswered
//     requests; the receiver checks every message's sequence number, so the
//     summary counts lost, duplicated and reordered messages beside msgs/s
//     and end-to-end latency percentiles.
//
// It is client-side code: it imports node/rpc only, never the node itself,
// so it measures exactly what any MAP client sees. Every run owns its
// connections and goroutines and releases them before it returns. A progress
// line goes to Config.Progress once a second; the caller prints the result
// (cmd/concord encodes it as JSON with --json).
package benchload
