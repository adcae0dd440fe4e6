package rpc

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Config tunes the JSON-RPC peer for every connection of a Server (and, via
// ClientConfig, of a dialled connection). Start from DefaultConfig.
type Config struct {
	// MaxFrameBytes is the largest inbound message (WebSocket message or
	// NDJSON line) accepted, in bytes. Larger messages are read and
	// discarded and answered with -32600 (see doc.go); the connection stays
	// up. Payloads of a few hundred KiB are ordinary in MAP.
	MaxFrameBytes int64

	// MaxBatchLen is the largest number of elements in one JSON-RPC batch.
	// Longer batches get a single -32600 reply.
	MaxBatchLen int

	// SendQueueLen bounds the frames waiting to be written to one peer.
	// When it is full, Notify fails fast with ErrSlowConsumer while replies
	// to the peer's own requests wait for room (backpressure on that peer).
	SendQueueLen int

	// SendQueueBytes bounds the bytes waiting to be written to one peer,
	// with the same rules as SendQueueLen. One frame is always accepted
	// into an empty queue, whatever its size.
	SendQueueBytes int64

	// NotifyQueueBytes is the smaller bound that applies to notifications
	// (Notify, NotifyRaw: subscription events) in the same queue: once
	// this many bytes wait, Notify fails with ErrSlowConsumer and the
	// caller's drop policy applies (fanout drops and reports
	// map/subscription.overflow, then closes the subscription). It keeps a
	// subscriber that never reads to a few MiB (twice this, counting the
	// batch being written) while replies keep the larger SendQueueBytes.
	NotifyQueueBytes int64

	// MaxDeferred bounds the requests of one connection whose handlers
	// deferred their reply (see Defer). At the bound the reader waits for
	// one of them to complete before it serves the next request, so a
	// pipelining peer gets backpressure rather than unbounded work. 0
	// disables deferral: every request is answered when its handler returns.
	MaxDeferred int

	// WriteTimeout bounds one flush of queued frames to the socket. A peer
	// that does not take our bytes for this long is disconnected.
	WriteTimeout time.Duration

	// PingInterval is how often a WebSocket ping is sent. Pings keep NAT and
	// proxies from dropping idle connections and detect dead peers.
	PingInterval time.Duration

	// PongTimeout is how long after a ping the peer has to answer before the
	// connection is considered dead (read deadline = PingInterval+PongTimeout
	// after the last pong).
	PongTimeout time.Duration

	// HandshakeTimeout bounds the WebSocket opening handshake.
	HandshakeTimeout time.Duration

	// ReaderLinger is how long a server-side WebSocket reader, having
	// served everything it read, waits for the next message on the
	// goroutine that served the last one, with its read buffer, before it
	// lets both go and waits on a fresh goroutine with a small stack (the
	// idle state, wsidle.go). A client that sends request after request
	// (one in flight) is then served without a goroutine start, the
	// regrowth of its stack and a second socket read per request; the cost
	// is that stack (typically 8-32 KiB) and a 16 KiB buffer held for this
	// long after a connection's last message. A connection lingers from
	// its second message on, so a burst of connects that then idle costs
	// no more than before. 0 never lingers.
	ReaderLinger time.Duration

	// PreAuthTimeout closes a WebSocket or HTTP session whose peer has not
	// authenticated (see Conn.Authenticated: map/connect succeeded) within
	// this long, with status 1008. Short, so idle anonymous sockets cannot
	// pile up; long enough for a slow client to send map/connect.
	PreAuthTimeout time.Duration

	// MaxPreAuthConns bounds the WebSockets and HTTP sessions, together,
	// that have not authenticated yet. More upgrades or session-opening
	// POSTs are answered 503 with Retry-After until some authenticate,
	// close or time out (PreAuthTimeout), so the bound drains by itself.
	MaxPreAuthConns int

	// MaxPreAuthConnsPerIP is the same bound per client IP (answered 429),
	// so one address cannot take every slot and lock out the rest.
	MaxPreAuthConnsPerIP int

	// CloseGracePeriod is how long we wait for the peer's close frame after
	// sending ours, before the socket is torn down.
	CloseGracePeriod time.Duration

	// CheckOrigin decides whether a browser's cross-origin WebSocket upgrade
	// is allowed. nil allows every origin: MAP authenticates in map/connect
	// with explicit credentials, never with ambient cookies.
	CheckOrigin func(r *http.Request) bool

	// Logger receives connection lifecycle logs and handler failures. nil
	// discards them.
	Logger *slog.Logger

	// Observer receives metrics callbacks. nil disables them.
	Observer Observer
}

// DefaultConfig returns production values.
func DefaultConfig() Config {
	return Config{
		MaxFrameBytes:        1 << 20,
		MaxBatchLen:          1000,
		SendQueueLen:         4096,
		SendQueueBytes:       32 << 20,
		NotifyQueueBytes:     4 << 20,
		MaxDeferred:          1024,
		WriteTimeout:         10 * time.Second,
		PingInterval:         30 * time.Second,
		PongTimeout:          30 * time.Second,
		HandshakeTimeout:     10 * time.Second,
		ReaderLinger:         250 * time.Millisecond,
		CloseGracePeriod:     time.Second,
		PreAuthTimeout:       10 * time.Second,
		MaxPreAuthConns:      1024,
		MaxPreAuthConnsPerIP: 128,
	}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.MaxFrameBytes < 1024:
		return fmt.Errorf("%w: MaxFrameBytes %d < 1024", ErrInvalidConfig, c.MaxFrameBytes)
	case c.MaxBatchLen < 1:
		return fmt.Errorf("%w: MaxBatchLen %d < 1", ErrInvalidConfig, c.MaxBatchLen)
	case c.SendQueueLen < 1:
		return fmt.Errorf("%w: SendQueueLen %d < 1", ErrInvalidConfig, c.SendQueueLen)
	case c.SendQueueBytes < 1:
		return fmt.Errorf("%w: SendQueueBytes %d < 1", ErrInvalidConfig, c.SendQueueBytes)
	case c.NotifyQueueBytes < 1:
		return fmt.Errorf("%w: NotifyQueueBytes %d < 1", ErrInvalidConfig, c.NotifyQueueBytes)
	case c.MaxDeferred < 0:
		return fmt.Errorf("%w: MaxDeferred %d < 0", ErrInvalidConfig, c.MaxDeferred)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("%w: WriteTimeout must be > 0", ErrInvalidConfig)
	case c.PingInterval <= 0:
		return fmt.Errorf("%w: PingInterval must be > 0", ErrInvalidConfig)
	case c.PongTimeout <= 0:
		return fmt.Errorf("%w: PongTimeout must be > 0", ErrInvalidConfig)
	case c.HandshakeTimeout <= 0:
		return fmt.Errorf("%w: HandshakeTimeout must be > 0", ErrInvalidConfig)
	case c.ReaderLinger < 0:
		return fmt.Errorf("%w: ReaderLinger must be >= 0", ErrInvalidConfig)
	case c.PreAuthTimeout <= 0:
		return fmt.Errorf("%w: PreAuthTimeout must be > 0", ErrInvalidConfig)
	case c.MaxPreAuthConns < 1 || c.MaxPreAuthConnsPerIP < 1:
		return fmt.Errorf("%w: MaxPreAuthConns and MaxPreAuthConnsPerIP must be >= 1", ErrInvalidConfig)
	case c.CloseGracePeriod < 0:
		return fmt.Errorf("%w: CloseGracePeriod must be >= 0", ErrInvalidConfig)
	}
	return nil
}

// ClientConfig configures Dial. The embedded Config has the same meaning as
// on the server side (CheckOrigin is ignored).
type ClientConfig struct {
	Config

	// Header is sent with the WebSocket upgrade request (e.g. Authorization).
	Header http.Header

	// TLSConfig is used for wss:// URLs; nil means the system defaults.
	TLSConfig *tls.Config
}

// DefaultClientConfig returns production values for Dial.
func DefaultClientConfig() ClientConfig { return ClientConfig{Config: DefaultConfig()} }

// Validate reports the first field that is out of range.
func (c ClientConfig) Validate() error { return c.Config.Validate() }

// Observer receives metrics callbacks from every connection. Implementations
// must be safe for concurrent use and fast: they run on the connection's
// goroutines.
type Observer interface {
	// RPCDone is called after an inbound request was handled (not for
	// notifications); code is 0 on success, else the error code sent.
	RPCDone(method string, code int, d time.Duration)
	// ConnOpened is called when a connection starts ("websocket", "stdio", "inprocess").
	ConnOpened(transport string)
	// ConnClosed is called once when that connection has ended.
	ConnClosed(transport string)
	// FrameRejected is called for each inbound frame answered with a
	// protocol error: "too_large", "parse", "invalid_request".
	FrameRejected(reason string)
}

type nopObserver struct{}

func (nopObserver) RPCDone(string, int, time.Duration) {}
func (nopObserver) ConnOpened(string)                  {}
func (nopObserver) ConnClosed(string)                  {}
func (nopObserver) FrameRejected(string)               {}

// discardLogger returns l, or a logger that drops everything if l is nil.
func discardLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
