// Package rpc is the JSON-RPC 2.0 peer every MAP connection runs on.
//
// It frames, decodes, dispatches and writes JSON-RPC messages over four
// transports: WebSocket (Server.ServeHTTP, Dial), HTTP+SSE sessions
// (Server.HTTPSSEHandler, sse.go), NDJSON over a pair of streams
// (Server.ServeStdio, for subprocess agents) and in-process pipes
// (Server.ServeConn). relay.go exports the framing a relay outside the
// package needs to read and answer frames exactly as a node does (LineReader,
// Envelopes, the *Response functions); its one user is the stdio bridge in
// node/client/stdio. Each connection is both a server (its Handler answers
// the peer) and a client (Conn.Call, Conn.Notify), as MAP requires
// (map-protocol.md §2). It knows nothing of MAP methods: node's MAP layer
// implements Handler. It defines the MAP error object and code table (§6).
//
// # Ordering and goroutines
//
// A connection has a reader goroutine, which also runs the Handler for
// every inbound request and notification in arrival order, one at a time
// (per-sender ordering for map/send comes for free), and, only while there
// is something to write, a writer that drains the bounded send queue. No
// goroutine is started per message. An idle WebSocket session holds just
// its reader, waiting on a shallow stack with no read buffer (wsidle.go):
// after serving input with nothing more buffered, and no more arriving
// within Config.ReaderLinger (from a connection's second message on), the
// reader continues on a fresh goroutine (the old one's stack grew while it
// served requests). A
// handler that blocks stalls only its own connection; one that waits on
// another party (map/send to another node) defers its reply instead
// (Defer): the reader serves the next request and the reply goes out when
// the handler calls Reply, in completion order. Calling Conn.Call on
// the connection whose request is being handled, with the handler's
// context, returns ErrCallInHandler instead of deadlocking.
//
// # Decoding
//
// Each frame is decoded once by a small validating scanner (scan.go): it
// checks the whole text is valid JSON and UTF-8 and remembers where the
// envelope members are. Params stay a sub-slice of the frame (Request.Params
// is raw JSON, never re-marshalled); each message gets its own buffer, so
// handlers may keep Params. Validation:
//   - malformed JSON or invalid UTF-8: -32700, id null;
//   - not an object, jsonrpc != "2.0", id not a string or integer, method
//     not a non-empty string, duplicate envelope member, params neither
//     object nor null: -32600 (echoing the id when one was readable);
//   - params given as an array (by-position): -32602, because the request is
//     valid JSON-RPC but MAP's schema only allows by-name params;
//   - params null is read as absent; unknown members are ignored (MAP
//     policy: accept a superset of the schema).
//
// Batches (arrays) are served element by element in order; the replies go
// back as one array frame, nothing if every element was a notification or
// response. An empty batch gets a single -32600, a syntactically broken one
// a single -32700, one longer than Config.MaxBatchLen a single -32600.
// Responses to our own Calls are recognised (no method, result or error)
// and handed to the waiting caller.
//
// # Oversized frames
//
// A message over Config.MaxFrameBytes is read and discarded as it streams
// in (memory stays bounded), and answered with -32600 "Message too large",
// details {limit}. If the id appears in the first 4 KiB it is echoed, so the
// caller's request fails at once instead of timing out; otherwise id is
// null. The connection stays open (MAP sessions are expensive to lose, and
// the peer may retry with a smaller payload). The WebSocket library's own
// read limit is disabled for this reason; the default limit is 1 MiB, so the
// few-hundred-KiB payloads MAP clients send are ordinary.
//
// # Writing and backpressure
//
// Every outbound frame goes through the connection's queue, bounded by
// Config.SendQueueLen frames and SendQueueBytes bytes. Notify/NotifyRaw
// never block: on a full queue they return ErrSlowConsumer and drop the
// frame (the MAP layer sends an overflow warning). Replies to the peer's own
// requests and Calls wait for room instead, so a peer that does not read its
// answers stops being served rather than growing memory.
//
// The writer takes the whole queue at each wake-up and writes it with one
// flush. gorilla/websocket writes each message with its own Write on the
// socket, so the socket under it is a corkConn (cork.go): during a drain
// frames are gathered in memory and reach the kernel as one write(2). This
// is the ARCHITECTURE.md hot-path rule (one write per frame halves a
// relay's rate). gorilla/websocket was chosen over coder/websocket because
// its synchronous API matches the two-goroutine model (no per-call context
// machinery), it exposes Hijack/NetDialContext seams for the corked socket on
// both the server and client side, and its control-frame writes are safe
// from the reader goroutine. permessage-deflate is not negotiated.
//
// # Measurements (2-core VM shared with other builds; loopback; noisy)
//
// `go test -run '^$' -bench . ./node/rpc/`:
//   - BenchmarkWSEchoBaseline (gorilla, one write(2) per echoed 256-byte
//     frame, pipelined client): 93k–140k msgs/s depending on machine load;
//     BenchmarkWSEchoCoder (coder/websocket server, same client): 82k–88k.
//   - BenchmarkRPCNotifyThroughput (server Notify of ~256-byte params to one
//     client, full stack both sides): 170k–214k msgs/s, 4 allocs/op.
//   - BenchmarkRPCRelayEcho (client notifications decoded by the server's
//     Handler and notified back, i.e. a relay without routing): ~82k msgs/s
//     under the same load that gave the baseline 93k.
//   - BenchmarkDecodeFrame vs BenchmarkDecodeFrameStdlib (a map/send frame):
//     1.3 µs, 0 allocs vs 8.8 µs, 11 allocs with encoding/json.
//
// The memory of idle sessions, before and after, is in DESIGN.md.
//
// # Keepalive and close
//
// The writer pings every PingInterval (asked by one process-wide schedule,
// keepalive.go, not a timer per connection); a connection that produces no pong
// within PingInterval+PongTimeout is dropped by its read deadline. Every
// real socket write has a WriteTimeout deadline. Close sends what is queued,
// then a close frame (1000, or 1001 on Shutdown), waits up to
// CloseGracePeriod for the peer's answer and closes the socket; a request
// being handled when Close is called still gets its reply. For NDJSON
// streams the goodbye is closing our writing half. Handler.Closed runs once
// per connection, after which Done is closed. Server.Shutdown closes every
// connection and waits for all their goroutines; if its context expires it
// tears them down hard (a handler that ignores its cancelled context can
// still keep its goroutine alive: handlers must honour ctx).
//
// # Before authentication
//
// A WebSocket or HTTP+SSE session holds a pre-auth slot until the handler
// calls Conn.Authenticated (map/connect succeeded): at most
// MaxPreAuthConnsPerIP per client IP (429 before the upgrade or session)
// and MaxPreAuthConns in all (503, Retry-After), and it is closed with 1008
// after PreAuthTimeout. So anonymous peers can hold only a bounded number
// of sockets, for a bounded time. Request ids longer than MaxIDBytes and
// method names longer than MaxMethodBytes are refused (-32600) and never
// echoed.
package rpc
