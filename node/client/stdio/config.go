package stdio

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// Config configures a Bridge (the stdio-to-WebSocket relay behind
// `concord stdio`). Start from DefaultConfig.
type Config struct {
	// URLs are the MAP WebSocket endpoints (ws:// or wss://) of the
	// system's nodes, tried in order; after a connection loss the next one
	// is tried first.
	URLs []string

	// MaxFrameBytes is the longest stdin line forwarded, in bytes. Longer
	// lines are answered here with the node's -32600 "Message too large";
	// keep it equal to the nodes' limit.
	MaxFrameBytes int64

	// MaxServerFrameBytes is the largest WebSocket message accepted from a
	// node, in bytes; a larger one drops the connection (failover). It only
	// guards the bridge's memory against a broken server.
	MaxServerFrameBytes int64

	// QueueLen bounds the stdin lines waiting to be sent. While it is full
	// (a reconnect is in progress, or the node reads slowly) stdin is not
	// read: the subprocess feels backpressure instead of the bridge growing.
	QueueLen int

	// HandshakeTimeout bounds one WebSocket dial and upgrade.
	HandshakeTimeout time.Duration

	// WriteTimeout bounds one frame write to the node.
	WriteTimeout time.Duration

	// PingInterval is how often the node is pinged; a connection with no
	// pong for PingInterval+PongTimeout is treated as lost.
	PingInterval time.Duration
	PongTimeout  time.Duration

	// ConnectTimeout bounds the first connection (all URLs, with backoff).
	// 0 waits forever: the subprocess may start before the system.
	ConnectTimeout time.Duration

	// ReconnectTimeout bounds the reconnection after a loss; past it Run
	// returns an error.
	ReconnectTimeout time.Duration

	// MinBackoff and MaxBackoff bound the pause between passes over URLs
	// (exponential with jitter). URLs within one pass are tried at once.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// Resume makes the bridge replay the subprocess's last successful
	// map/connect with its sessionId and resumeToken on every new
	// connection, so the MAP session (agents, subscriptions) survives a
	// failover without the subprocess knowing how to resume.
	Resume bool

	// ResumeTimeout bounds the replayed map/connect.
	ResumeTimeout time.Duration

	// DrainTimeout is how long, after stdin ends, the bridge waits for the
	// responses to requests already sent before it closes.
	DrainTimeout time.Duration

	// Header is sent with every WebSocket upgrade (e.g. Authorization).
	Header http.Header

	// TLSConfig is used for wss:// URLs; nil means the system defaults.
	TLSConfig *tls.Config

	// Logger receives connection events (never stdout). nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns production values (URLs left empty).
func DefaultConfig() Config {
	return Config{
		MaxFrameBytes:       rpc.DefaultConfig().MaxFrameBytes,
		MaxServerFrameBytes: 64 << 20,
		QueueLen:            1024,
		HandshakeTimeout:    10 * time.Second,
		WriteTimeout:        10 * time.Second,
		PingInterval:        15 * time.Second,
		PongTimeout:         15 * time.Second,
		ConnectTimeout:      10 * time.Second,
		ReconnectTimeout:    2 * time.Minute,
		MinBackoff:          100 * time.Millisecond,
		MaxBackoff:          5 * time.Second,
		Resume:              true,
		ResumeTimeout:       10 * time.Second,
		DrainTimeout:        5 * time.Second,
	}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case len(c.URLs) == 0:
		return fmt.Errorf("%w: no URLs", rpc.ErrInvalidConfig)
	case c.MaxFrameBytes < 1024:
		return fmt.Errorf("%w: MaxFrameBytes %d < 1024", rpc.ErrInvalidConfig, c.MaxFrameBytes)
	case c.MaxServerFrameBytes < c.MaxFrameBytes:
		return fmt.Errorf("%w: MaxServerFrameBytes below MaxFrameBytes", rpc.ErrInvalidConfig)
	case c.QueueLen < 1:
		return fmt.Errorf("%w: QueueLen %d < 1", rpc.ErrInvalidConfig, c.QueueLen)
	case c.HandshakeTimeout <= 0 || c.WriteTimeout <= 0 || c.PingInterval <= 0 || c.PongTimeout <= 0:
		return fmt.Errorf("%w: HandshakeTimeout, WriteTimeout, PingInterval and PongTimeout must be > 0", rpc.ErrInvalidConfig)
	case c.ConnectTimeout < 0 || c.ReconnectTimeout <= 0:
		return fmt.Errorf("%w: ConnectTimeout must be >= 0 and ReconnectTimeout > 0", rpc.ErrInvalidConfig)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("%w: want 0 < MinBackoff <= MaxBackoff", rpc.ErrInvalidConfig)
	case c.ResumeTimeout <= 0 || c.DrainTimeout < 0:
		return fmt.Errorf("%w: ResumeTimeout must be > 0 and DrainTimeout >= 0", rpc.ErrInvalidConfig)
	}
	return nil
}

// logger returns Logger, or one that discards.
func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}
