package rpc

import (
	"errors"
	"time"
)

// transport moves whole messages. Exactly one goroutine (the connection's
// reader) calls readMessage and exactly one (the writer) calls
// writeMessages, ping and sendClose; close may be called from any goroutine,
// more than once, and must unblock both.
type transport interface {
	// readMessage returns the next inbound message in a fresh buffer that
	// the caller owns. An over-limit message is consumed and reported as
	// a *tooLargeError; the transport stays usable.
	readMessage() ([]byte, error)
	// writeMessages writes the frames in order and flushes once.
	writeMessages(frames []*frame) error
	// ping sends a keepalive, if the transport has one.
	ping() error
	// sendClose says goodbye (WebSocket close frame) without closing.
	sendClose(code int, reason string) error
	// close tears the transport down.
	close() error
	kind() string
	remoteAddr() string
}

// idleReleaser is implemented by transports that can drop their read
// buffers between messages. releaseIfIdle is called by the reader between
// messages; when nothing is buffered it releases what it can and reports
// true. The next read must then be preceded by waitInput, which waits for
// input holding almost no memory, on a shallow stack. Before that the
// reader may linger, which waits at most d for input with the buffer kept;
// inputBuffered reports whether input is buffered (then there is no need).
type idleReleaser interface {
	releaseIfIdle() bool
	waitInput() error
	linger(d time.Duration)
	inputBuffered() bool
}

// tooLargeError reports an inbound message over MaxFrameBytes that was
// discarded. prefix holds its first bytes, to recover the request id.
type tooLargeError struct {
	limit  int64
	prefix []byte
}

func (e *tooLargeError) Error() string { return ErrFrameTooLarge.Error() }
func (e *tooLargeError) Unwrap() error { return ErrFrameTooLarge }

// idPrefixBytes is how much of an oversized message is kept to find its id.
const idPrefixBytes = 4096

// Close codes (RFC 6455 §7.4.1) used when we end a connection.
const (
	closeNormal     = 1000
	closeGoingAway  = 1001
	closeProtocol   = 1002
	closeInternal   = 1011
	closeRestart    = 1012 // "service restart": reconnect, here or elsewhere
	closeTooBig     = 1009
	maxReasonLength = 123 // a close frame payload is at most 125 bytes
)

// errTransportClosed is returned by transports after close.
var errTransportClosed = errors.New("rpc: transport closed")
