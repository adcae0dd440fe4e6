package benchload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// SessionsConfig configures Sessions. Start from DefaultSessionsConfig.
type SessionsConfig struct {
	// URLs are MAP WebSocket endpoints; session i connects to URLs[i%len].
	URLs []string
	// Sessions is how many idle sessions to open.
	Sessions int
	// Concurrency is how many connects are under way at once.
	Concurrency int
	// Settle is how long the sessions stay idle before the nodes' memory is
	// read (lets per-connection buffers reach their idle state).
	Settle time.Duration
	// ConnectTimeout bounds one dial plus map/connect.
	ConnectTimeout time.Duration
	// Progress receives a line a second; nil prints nothing.
	Progress io.Writer
	// RPC configures every connection; its TLSConfig also serves the
	// https requests for /v1/status when the URLs are wss://.
	RPC rpc.ClientConfig
	// Auth is the participants' credential (zero: anonymous).
	Auth Credential
}

// DefaultSessionsConfig returns 1000 sessions, 64 connects at once.
func DefaultSessionsConfig() SessionsConfig {
	return SessionsConfig{Sessions: 1000, Concurrency: 64, Settle: time.Second, ConnectTimeout: 10 * time.Second, RPC: rpc.DefaultClientConfig()}
}

// Validate reports the first field out of range.
func (c SessionsConfig) Validate() error {
	switch {
	case len(c.URLs) == 0:
		return errors.New("benchload: at least one URL is required")
	case c.Sessions < 1 || c.Concurrency < 1:
		return fmt.Errorf("benchload: sessions %d and concurrency %d must be >= 1", c.Sessions, c.Concurrency)
	case c.Settle < 0 || c.ConnectTimeout <= 0:
		return errors.New("benchload: settle must be >= 0 and connect timeout > 0")
	}
	return c.RPC.Validate()
}

// SessionsResult is Sessions' summary. RSSBytes and Goroutines are summed
// over the distinct URLs (one node: that node's figures); the Before
// figures were read before the first connect.
type SessionsResult struct {
	Sessions  int   `json:"sessions"`
	Connected int64 `json:"connected"`
	Errors    int64 `json:"errors"`
	// FirstError is the first failed connect's error ("" when none), e.g.
	// an anonymous-session rate limit (4001) on a node without credentials.
	FirstError        string        `json:"first_error,omitempty"`
	ElapsedMs         float64       `json:"elapsed_ms"`
	ConnectPerSec     float64       `json:"connect_per_sec"`
	RSSBytes          int64         `json:"rss_bytes"`
	RSSBeforeBytes    int64         `json:"rss_before_bytes"`
	RSSPerSession     int64         `json:"rss_per_session_bytes"`
	Goroutines        int           `json:"goroutines"`
	GoroutinesBefore  int           `json:"goroutines_before"`
	GoroutinesPerSess float64       `json:"goroutines_per_session"`
	Nodes             []NodeProcess `json:"nodes"`
}

// Sessions opens Sessions idle sessions, reads the nodes' memory while they
// are all open, and closes them.
func Sessions(ctx context.Context, cfg SessionsConfig) (SessionsResult, error) {
	if err := cfg.Validate(); err != nil {
		return SessionsResult{}, err
	}
	before, err := readProcesses(ctx, cfg.URLs, cfg.RPC.TLSConfig)
	if err != nil {
		return SessionsResult{}, fmt.Errorf("read node status before: %w", err)
	}
	conns := make([]*rpc.Conn, cfg.Sessions)
	defer closeConns(conns)
	var cnt counters
	prog := startProgress(cfg.Progress, "sessions", &cnt)
	start := time.Now()
	firstErr := parallel(cfg.Sessions, cfg.Concurrency, func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
		c, err := dialSession(cctx, pick(cfg.URLs, i), cfg.RPC, cfg.Auth, nil, "client", "")
		if err != nil {
			cnt.errors.Add(1)
			return err
		}
		conns[i] = c
		cnt.done.Add(1)
		return nil
	})
	elapsed := time.Since(start)
	prog.stop()
	if err := ctx.Err(); err != nil {
		return SessionsResult{}, err
	}
	select {
	case <-time.After(cfg.Settle):
	case <-ctx.Done():
		return SessionsResult{}, ctx.Err()
	}
	after, err := readProcesses(ctx, cfg.URLs, cfg.RPC.TLSConfig)
	if err != nil {
		return SessionsResult{}, fmt.Errorf("read node status with sessions open: %w", err)
	}
	res := SessionsResult{
		Sessions:      cfg.Sessions,
		Connected:     cnt.done.Load(),
		Errors:        cnt.errors.Load(),
		ElapsedMs:     float64(elapsed.Microseconds()) / 1000,
		ConnectPerSec: float64(cnt.done.Load()) / elapsed.Seconds(),
		Nodes:         after,
	}
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	for i := range after {
		res.RSSBytes += after[i].RSSBytes
		res.Goroutines += after[i].Goroutines
		res.RSSBeforeBytes += before[i].RSSBytes
		res.GoroutinesBefore += before[i].Goroutines
	}
	if res.Connected > 0 {
		res.RSSPerSession = (res.RSSBytes - res.RSSBeforeBytes) / res.Connected
		res.GoroutinesPerSess = float64(res.Goroutines-res.GoroutinesBefore) / float64(res.Connected)
	}
	return res, nil
}
