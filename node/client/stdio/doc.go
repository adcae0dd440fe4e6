// Package stdio is the engine of `concord stdio`: a Bridge that lets a
// subprocess speak MAP as NDJSON on its stdin/stdout (map-protocol.md §2.2)
// to a Concord system over WebSocket, failing over between the system's
// nodes.
//
// The bridge forwards frames untouched and speaks MAP in three places only:
// it answers lines the node would refuse at the framing level (too large,
// not JSON) with the node's exact bytes, it answers requests in flight when
// a connection drops with a connection-lost error, and with Config.Resume
// it replays the subprocess's last map/connect with its session credentials
// on the next node, then tells the subprocess with a ReconnectedMethod
// notification. It reads and writes frames with node/rpc's exported relay
// framing, so its answers stay byte-identical to a node's.
package stdio
