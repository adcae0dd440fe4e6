package rpc

import (
	"fmt"
	"time"
)

// SSEConfig tunes the HTTP+SSE transport (HTTPSSEHandler). Frame size,
// batch length, logger and observer come from the Server's Config, so the
// same limits apply as on WebSocket. Start from DefaultSSEConfig.
type SSEConfig struct {
	// IdleTimeout closes an HTTP session that has no POST in flight and no
	// event stream attached for this long, exactly as if its WebSocket had
	// dropped (the MAP disconnect policy applies). Longer keeps sessions of
	// clients that poll rarely; shorter frees abandoned ones sooner.
	IdleTimeout time.Duration

	// RequestTimeout bounds how long a POST waits, in total, to hand its
	// body to the session and for the responses to its requests. When it
	// passes the POST answers 504; responses that arrive later are
	// delivered on the event stream instead.
	RequestTimeout time.Duration

	// HeartbeatInterval is how often an idle event stream gets an SSE
	// comment line, so proxies and load balancers keep it open and a dead
	// client is noticed by a failing write.
	HeartbeatInterval time.Duration

	// MaxSessions bounds the HTTP sessions of one handler. A POST that
	// would create one more is answered 503, so anonymous clients cannot
	// grow memory without bound.
	MaxSessions int

	// MaxSessionsPerIP bounds the HTTP sessions of one client IP, so one
	// address cannot take all MaxSessions. (Sessions not authenticated
	// yet are further bounded by Config.MaxPreAuthConns{,PerIP} and closed
	// after Config.PreAuthTimeout.)
	MaxSessionsPerIP int

	// BufferEvents bounds, per session, the events kept for the event
	// stream: those not yet written (no stream attached, or a slow one)
	// and the most recent written ones, replayed to a client reconnecting
	// with Last-Event-ID. When it is exceeded the oldest event is dropped;
	// a stream that had not written it yet reports the gap (map.gap).
	BufferEvents int

	// BufferBytes bounds the same buffer in bytes, with the same rule.
	BufferBytes int64
}

// DefaultSSEConfig returns production values.
func DefaultSSEConfig() SSEConfig {
	return SSEConfig{
		IdleTimeout:       2 * time.Minute,
		RequestTimeout:    30 * time.Second,
		HeartbeatInterval: 15 * time.Second,
		MaxSessions:       10000,
		MaxSessionsPerIP:  256,
		BufferEvents:      1024,
		BufferBytes:       8 << 20,
	}
}

// Validate reports the first field that is out of range.
func (c SSEConfig) Validate() error {
	switch {
	case c.IdleTimeout <= 0:
		return fmt.Errorf("%w: IdleTimeout must be > 0", ErrInvalidConfig)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("%w: RequestTimeout must be > 0", ErrInvalidConfig)
	case c.HeartbeatInterval <= 0:
		return fmt.Errorf("%w: HeartbeatInterval must be > 0", ErrInvalidConfig)
	case c.MaxSessions < 1:
		return fmt.Errorf("%w: MaxSessions %d < 1", ErrInvalidConfig, c.MaxSessions)
	case c.MaxSessionsPerIP < 1:
		return fmt.Errorf("%w: MaxSessionsPerIP %d < 1", ErrInvalidConfig, c.MaxSessionsPerIP)
	case c.BufferEvents < 1:
		return fmt.Errorf("%w: BufferEvents %d < 1", ErrInvalidConfig, c.BufferEvents)
	case c.BufferBytes < 1:
		return fmt.Errorf("%w: BufferBytes %d < 1", ErrInvalidConfig, c.BufferBytes)
	}
	return nil
}
