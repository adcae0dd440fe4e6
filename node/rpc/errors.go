package rpc

import "errors"

// Sentinel errors of package rpc. Compare with errors.Is.
var (
	// ErrClosed is returned by Notify, NotifyRaw and Call once the connection
	// has been closed (by either side, by Shutdown, or after a transport error).
	ErrClosed = errors.New("rpc: connection closed")

	// ErrSlowConsumer is returned by Notify and NotifyRaw when the connection's
	// bounded send queue is full: the peer does not read fast enough. The frame
	// is dropped; the caller decides what to do (MAP sends an overflow warning
	// later or closes the subscription). The connection stays open.
	ErrSlowConsumer = errors.New("rpc: send queue full (slow consumer)")

	// ErrCallInHandler is returned by Call when it is invoked with the context
	// Handle received, for the same connection: the connection's reader
	// goroutine is busy running that handler, so the peer's response could
	// never be read and the call would deadlock. Call from another goroutine.
	ErrCallInHandler = errors.New("rpc: Call on the connection whose request is being handled would deadlock")

	// ErrServerClosed is returned by the Serve* methods after Shutdown began.
	ErrServerClosed = errors.New("rpc: server closed")

	// ErrFrameTooLarge is the cause recorded when a peer sent a message larger
	// than Config.MaxFrameBytes. The message is discarded; see doc.go.
	ErrFrameTooLarge = errors.New("rpc: frame exceeds MaxFrameBytes")

	// ErrInvalidConfig wraps every Config.Validate / ClientConfig.Validate failure.
	ErrInvalidConfig = errors.New("rpc: invalid config")
)
