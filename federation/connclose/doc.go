// Package connclose closes network connections promptly whatever the peer
// does. It lives under federation, the lowest layer with gRPC links, so that
// federation and node (node/cluster, node/rpc, the stdio bridge) share it.
//
// crypto/tls's Close first sends a close_notify alert, a write that it
// bounds by its own 5 s deadline (a shorter one set before Close has no
// effect). Toward a peer that stopped reading with a full socket buffer
// (a partitioned or frozen server, a stalled client) every close then
// holds its caller 5 s: a shutdown, a lock, a reconnect loop. Close here
// sends the alert when it can go out at once and otherwise cuts the
// socket underneath after a short grace. gRPC adds a wait of its own: a
// ClientConn's Close waits up to 5 s for its writer to send a GOAWAY
// that a stalled peer never takes; Credentials and CloseWithin cut the
// sockets under such a close. raftstore/connclose.go is the Raft
// transport's counterpart (always abrupt: it cannot import this package).
//
// Nothing is lost by cutting: HTTP/2 and WebSocket frames are
// self-delimiting and both protocols say goodbye in their own frames
// (GOAWAY, the close frame) before the socket closes; a peer reading a TLS
// stream that ends at a record boundary sees io.EOF either way.
package connclose
