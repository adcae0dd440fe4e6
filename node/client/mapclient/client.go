package mapclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/concordmap/concord/node/rpc"
)

// Client is a MAP participant connected to one node of a system at a time.
// All methods are safe for concurrent use. Build it with Dial, release it
// with Close.
type Client struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	conn    *rpc.Conn     // nil while reconnecting
	ready   chan struct{} // closed when conn is installed; replaced on loss
	info    SessionInfo
	urlIdx  int
	agents  []AgentSpec              // registered agents, in registration order
	subs    map[string]*Subscription // by the server's current subscription id
	pending int                      // map/subscribe calls in flight
	held    []Event                  // events for ids not known yet (while pending > 0)
	closed  bool
	err     error // why the supervisor gave up

	subMu      sync.Mutex // serialises map/subscribe with the restore
	dispatchMu sync.Mutex // orders handler calls (reader vs held-back flush)

	cancel context.CancelFunc // stops the supervisor
	done   chan struct{}      // closed when the supervisor has exited
}

// Dial connects to the first URL of cfg.URLs that accepts map/connect
// (cycling through them with backoff until ctx ends) and starts the
// supervisor that reconnects on loss.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Client{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "mapclient", "participant_type", cfg.ParticipantType),
		ready: make(chan struct{}),
		subs:  map[string]*Subscription{},
		done:  make(chan struct{}),
	}
	conn, res, idx, err := c.connectAny(ctx, 0)
	if err != nil {
		return nil, err
	}
	c.install(conn, res, idx)
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.supervise(runCtx)
	return c, nil
}

// install makes conn the current connection. Caller must not hold c.mu.
func (c *Client) install(conn *rpc.Conn, res connectResult, idx int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn, c.urlIdx = conn, idx
	c.info = SessionInfo{SessionID: res.SessionID, ParticipantID: res.ParticipantID,
		ResumeToken: res.ResumeToken, URL: c.cfg.URLs[idx], Capabilities: res.Capabilities}
	close(c.ready)
}

// Session returns the current session.
func (c *Client) Session() SessionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Done is closed when the client stopped for good: Close was called or the
// supervisor gave up reconnecting (see Err).
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the client stopped: ErrClosed after Close, a wrapped
// ErrUnreachable when reconnecting failed, nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.closed {
		return ErrClosed
	}
	return nil
}

// waitConn returns the live connection, waiting while the client reconnects.
func (c *Client) waitConn(ctx context.Context) (*rpc.Conn, error) {
	for {
		c.mu.Lock()
		conn, ready, closed, err := c.conn, c.ready, c.closed, c.err
		c.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case err != nil:
			return nil, err
		case conn != nil:
			return conn, nil
		}
		select {
		case <-ready:
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Call sends a request (any MAP or extension method) on the current
// connection and returns its raw result. It waits while the client
// reconnects. A server error comes back as *rpc.Error (wrapped; use
// errors.As or rpc.IsCode); a drop in flight as ErrConnectionLost.
func (c *Client) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	conn, err := c.waitConn(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return c.callOn(ctx, conn, method, params)
}

func (c *Client) callOn(ctx context.Context, conn *rpc.Conn, method string, params any) (json.RawMessage, error) {
	raw, err := conn.Call(ctx, method, params)
	if errors.Is(err, rpc.ErrClosed) {
		if c.Err() != nil {
			return nil, fmt.Errorf("%s: %w", method, c.Err())
		}
		return nil, fmt.Errorf("%s: %w", method, ErrConnectionLost)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return raw, nil
}

// CallRetry is Call for idempotent requests: a call cut by a connection loss
// is repeated on the next connection until ctx ends.
func (c *Client) CallRetry(ctx context.Context, method string, params any) (json.RawMessage, error) {
	for {
		raw, err := c.Call(ctx, method, params)
		if !errors.Is(err, ErrConnectionLost) {
			return raw, err
		}
		c.log.Debug("retrying call after connection loss", "method", method)
	}
}

// CallResult calls method and decodes its result into out.
func (c *Client) CallResult(ctx context.Context, method string, params, out any) error {
	raw, err := c.Call(ctx, method, params)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadResponse, method, err)
	}
	return nil
}

// Close sends map/disconnect (best effort, bounded by ctx), closes the
// connection and stops the supervisor. The session stays resumable on the
// server until its TTL; agents follow the session's disconnect policy
// (unregister them first for a clean exit).
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed = true
	conn := c.conn
	c.mu.Unlock()
	var err error
	if conn != nil {
		if _, cerr := conn.Call(ctx, "map/disconnect", map[string]any{"reason": "client closed"}); cerr != nil &&
			!errors.Is(cerr, rpc.ErrClosed) {
			err = fmt.Errorf("map/disconnect: %w", cerr)
		}
		_ = conn.Close("client closed")
	}
	c.cancel()
	<-c.done
	if conn != nil {
		select {
		case <-conn.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}
