package cluster

// Flow-control windows of every connection between the servers of a
// system, both directions, fixed. Given a window, grpc turns its BDP
// estimator off; left on, it answers almost every DATA frame of a sparse
// stream (a forwarded write, its reply) with a WINDOW_UPDATE and a PING
// that the peer must acknowledge. For the writes and fences a non-voter
// forwards to the leader that was about two extra frames, socket writes
// and goroutine wake-ups each way per write, on both servers
// (BenchmarkForwardedWrites, raftstore/DESIGN.md "Tenth round"). The
// estimator grows windows for links with a large bandwidth-delay product;
// the servers of one system sit on one network, where 1 MiB per stream
// (4 MiB per connection) keeps a snapshot chunk or a relay batch in flight
// at well over a gigabyte a second per millisecond of round trip.
// Federation links (federation/) keep grpc's defaults.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)
