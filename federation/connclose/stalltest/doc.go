// Package stalltest gives tests a peer that stopped reading: it accepts
// connections on loopback with a small receive buffer, optionally
// completes a TLS handshake and writes a greeting, then never reads
// again, so the dialer's socket buffers fill as they do toward a frozen or
// partitioned server. WebSocket does the same after accepting a
// WebSocket upgrade (a foreign MAP server that froze). Tests of prompt closes (connclose and its users in
// node/cluster and federation) share it.
package stalltest
